"""Trained judges: mine labelled mismatches on the user's own (draft, target) pair (``mine``, ``search``, a store
of its own), and fit the heads the ``autojudge`` and ``judge-decoding`` policies read (``train``)."""
