"""The test kit: what the tests of several packages share, one home each.

runners.py  fakes of the model runner (FakeRunner: free, scores a function of the tokens; SlowRunner:
            each forward takes wall time, so requests pile up)
models.py   a tiny random Llama with a real tokenizer, saved to a folder (loads in well under a second)
servers.py  a scoring server in this process over a runner (live_server, serving), its config, and
            a server subprocess's environment and readiness
waiting.py  bounded polling: wait_for (tests never sleep for correctness), wait_http
Processes a test starts are stopped, and ports found, by bench.server_process (stop, free_port):
benchmarks start the same processes.
"""
