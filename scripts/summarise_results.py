#!/usr/bin/env python3
"""Prints one line per configuration of zero_bench / offload_bench result files and train --json records (the
same JSON records), and one per PyTorch reference run (the JSON line torch_reference.py prints), so that a batch
of runs on a GPU host ends with one table to read. Reads the records; scrapes no console output.

Usage: scripts/summarise_results.py FILE_OR_FOLDER ...
  (folders: every *_comparison_*.json, train_*.json and torch_*.json in them)
"""
import glob
import json
import os
import sys


def files(arguments):
    for a in arguments:
        if os.path.isdir(a):
            yield from sorted(p for p in glob.glob(os.path.join(a, "**", "*_comparison_*.json"), recursive=True)
                              if not os.path.basename(p).startswith("ds_config_"))
            yield from sorted(glob.glob(os.path.join(a, "**", "train_*.json"), recursive=True))
            yield from sorted(glob.glob(os.path.join(a, "**", "torch_*.json"), recursive=True))
        else:
            yield a


def number(value, pattern):
    return "-" if value is None else pattern.format(value)


def record_line(r):
    config = r["strategy"] + f" (stage {r['stage']})" if r["strategy"] != "none" else f"stage {r['stage']}"
    if r.get("lora", "none") != "none":
        config += f", LoRA {r['lora']}"
    phases = "fwd/bwd/opt/exposed " + "/".join(number(r.get(k), "{:.1f}") for k in
                                               ("forward_ms", "backward_ms", "optimizer_ms", "exposed_comm_ms"))
    offload = ""
    if r.get("offload_cpu_optimizer_ms") is not None:
        offload = (f" | cpu opt {number(r.get('offload_cpu_optimizer_ms'), '{:.0f}')} ms, wait "
                   f"{number(r.get('offload_wait_ms'), '{:.0f}')} ms, host {number(r.get('cpu_pinned_gb'), '{:.1f}')} GB")
    ranks = r.get("per_rank") or []
    clocks = [p["sm_clock_mhz_median"] for p in ranks if p.get("sm_clock_mhz_median") is not None]
    powers = [p["power_w_median"] for p in ranks if p.get("power_w_median") is not None]
    telemetry = ""
    if clocks:
        telemetry = f" | SM {min(clocks):.0f}-{max(clocks):.0f} MHz, {min(powers):.0f}-{max(powers):.0f} W"
    spread = ""
    if r.get("rank_step_spread_pct") is not None and r["world_size"] > 1:
        spread = f" | spread {r['rank_step_spread_pct']:.1f}%/{r['rank_busy_spread_pct']:.1f}%"
    status = r["status"] if r["status"] == "ok" else f"{r['status']}: {r['error'][:120]}"
    return (f"{r['model']} B{r['batch_size']}x{r['seq_length']} x{r['world_size']} {config}: "
            f"{number(r.get('throughput_tokens_per_sec'), '{:.0f}')} tok/s, "
            f"{number(r.get('avg_step_time_ms'), '{:.1f}')} ms, MFU {number(r.get('mfu'), '{:.3f}')}, "
            f"peak {number(r.get('gpu_peak_gb'), '{:.1f}')} GB, {phases}{offload}{telemetry}{spread} | {status}"
            + (f" | {r['recommendation']}" if r.get("recommendation") else ""))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    paths = list(files(sys.argv[1:]))
    for path in paths:
        try:
            with open(path) as f:
                text = f.read()
        except OSError as e:
            print(f"{path}: {e}")
            continue
        if os.path.basename(path).startswith("torch_"):
            line = next((l for l in text.splitlines() if l.startswith("{")), None)
            if not line:
                print(f"PyTorch {os.path.basename(path)}: no result (failed; see its .err)")
                continue
            t = json.loads(line)
            extras = "".join(f", {name} {t[key]}" for key, name in (("checkpoint", "checkpoint"), ("lora_rank", "LoRA rank"))
                             if t.get(key))
            print(f"PyTorch {t['mode']} {t['model']} B{t['B']}x{t['T']} x{t['world']}{extras}: {t['tok_s']} tok/s, "
                  f"{t['step_ms']} ms, {t['tflops_per_gpu']} TFLOP/s a GPU, peak {t['peak_gib']} GiB")
            continue
        if len(paths) > 1:
            print(f"# {path}")
        for r in json.loads(text):
            print(record_line(r))


if __name__ == "__main__":
    main()
