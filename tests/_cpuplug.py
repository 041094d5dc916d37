import json, os, resource, pytest

def _cpu():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    start = _cpu()
    yield
    with open(f"/tmp/cpu-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}.jsonl", "a") as fh:
        fh.write(json.dumps({"id": item.nodeid, "cpu": _cpu() - start}) + "\n")
