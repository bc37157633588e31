#!/usr/bin/env python3
"""PyTorch's CPU AdamW on fp32 parameters, the reference for cpu_optimizer_bench: one JSON line per
implementation (fused, foreach) with the mean time of a step over --repeats steps after one untimed step, and
parameters updated per second. Uses every core PyTorch is given (OMP_NUM_THREADS / torch.get_num_threads()).

Usage: scripts/reference/cpu_adam_reference.py [--params N] [--repeats K]
"""
import argparse
import json
import time

import torch


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--params", type=int, default=1 << 28, help="fp32 parameters updated a step")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps")
    args = parser.parse_args()
    torch.manual_seed(0)
    for implementation in ("fused", "foreach"):
        weights = torch.nn.Parameter(torch.randn(args.params))
        weights.grad = torch.randn(args.params)
        optimizer = torch.optim.AdamW([weights], lr=3e-4, **{implementation: True})
        optimizer.step()  # the moments are allocated on the first step
        start = time.perf_counter()
        for _ in range(args.repeats):
            optimizer.step()
        seconds = (time.perf_counter() - start) / args.repeats
        print(json.dumps({"reference": "torch_cpu_adamw", "impl": implementation, "threads": torch.get_num_threads(),
                          "params": args.params, "ms": round(seconds * 1e3, 1),
                          "Mparams_per_s": round(args.params / seconds / 1e6)}), flush=True)


if __name__ == "__main__":
    main()
