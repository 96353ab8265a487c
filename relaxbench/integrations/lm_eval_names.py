"""Names shared by the lm-eval task source and its light loader."""

PREFIX = "lm_eval:"  # compare task names of lm-eval tasks: lm_eval:NAME
SCORER_NAME = "lm-eval"  # the scorer stored with their cells
TARGET_ALONE = ("multiple_choice", "loglikelihood", "loglikelihood_rolling")  # output types scored by likelihoods
