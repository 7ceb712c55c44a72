"""`python -m bench.gpu`: SGLang's scoring benchmark on a random-init Qwen3-0.6B-shaped model,
served in bfloat16 on CUDA (checks the environment and CUDA correctness first); `--dry-run` does
the same with a tiny model on the CPU in seconds (the test suite runs it so it cannot rot).
"""
