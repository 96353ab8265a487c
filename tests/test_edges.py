

# ------------------------------------------------------------------------------ the cache, shared by processes


def test_a_cache_entry_is_built_by_one_process_at_a_time(tmp_path: Path):
    """A second holder of an entry's lock waits until the first lets go (two workers, or two runs, that need one
    model at once)."""
    import threading

    from relaxbench.models.fetch import exclusive

    entry = tmp_path / "models" / "some-model"
    first_in, first_out, second_in = threading.Event(), threading.Event(), threading.Event()

    def first():
        with exclusive(entry):
            first_in.set()
            first_out.wait(30)

    def second():
        first_in.wait(30)
        with exclusive(entry):
            second_in.set()

    threads = [threading.Thread(target=first), threading.Thread(target=second)]
    for t in threads:
        t.start()
    assert first_in.wait(30)
    assert not second_in.wait(0.5)  # still held by the first
    first_out.set()
    assert second_in.wait(30)
    for t in threads:
        t.join(30)
    assert (tmp_path / "models" / "some-model.lock").is_file()


def test_two_processes_build_one_tiny_model_into_an_empty_cache(tmp_path: Path):
    import subprocess
    import sys

    code = ("from relaxbench.models.convert import materialize; from relaxbench.models.resolve import resolve_model; "
            "print(materialize(resolve_model('tiny-random-target'), quiet=True))")
    env = {**os.environ, "RELAXBENCH_CACHE": str(tmp_path / "cache"),
           "PYTHONPATH": str(Path(__file__).resolve().parents[1]) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env) for _ in range(2)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [err for _, err in outs]
    folders = {out.strip() for out, _ in outs}
    assert len(folders) == 1
    from transformers import AutoConfig

    assert AutoConfig.from_pretrained(folders.pop()).vocab_size > 0  # whole, not half-built
