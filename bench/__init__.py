"""Benchmarks of the scoring server: programs that print numbers (tests never assert on time).

workload.py   pure: the scoring workload (random token ids from a seed), Poisson arrivals, summaries
client.py     HTTP: send /v1/score open-loop or closed-loop, sample /get_load for the peaks
score_load.py `python -m bench.score_load`: SGLang bench_score-style open-loop load, one summary
free_server.py a server whose model costs nothing: the scheduler + HTTP overhead alone
server_process.py start `python -m server` (or the free server) as a subprocess; its peak RSS
offline.py    in-process: the naive one-forward-per-item loop and ModelRunner.run, no HTTP
compare.py    `python -m bench.compare`: all of the above side by side, interleaved, as a table
"""
