#!/usr/bin/env bash
# Per-kernel hardware view of one decode step (Nsight Compute, clocks left alone):
# duration, DRAM throughput, occupancy and registers of each of the step's kernels.
# Usage on the GPU machine: bash bench/ncu_step.sh MODEL.gguf
set -uo pipefail
OUT=${OUT:-gpu-out}
mkdir -p "$OUT"
ncu --clock-control none -k regex:"k_(matvec|attention|embed|commit)" --launch-count 143 --csv --page raw --print-units base \
    --metrics gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,dram__bytes_read.sum,sm__warps_active.avg.pct_of_peak_sustained_active,launch__registers_per_thread,launch__grid_size,launch__occupancy_limit_registers,smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct,smsp__warp_issue_stalled_barrier_per_warp_active.pct \
    build/edgerunner run -m "$1" --backend cuda --prompt-ids 1 -n 2 --temp 0 --ids > "$OUT/ncu.csv" 2> "$OUT/ncu.err"
python3 - "$OUT/ncu.csv" <<'PY'
import csv, sys, collections
rows = list(csv.reader(open(sys.argv[1])))
f = lambda s: float(s.replace(",", "")) if s else 0.0
hdr = next(i for i, r in enumerate(rows) if r and r[0] == "ID")
h = rows[hdr]; data = rows[hdr + 2:]
col = {k: h.index(k) for k in h}
agg = collections.OrderedDict()
for r in data:
    name = r[col["Kernel Name"]].split("(")[0][:40]
    grid = r[col["launch__grid_size"]]
    key = (name, grid)
    a = agg.setdefault(key, [0, 0.0, 0.0, 0.0, 0.0, r[col["launch__registers_per_thread"]], 0.0, 0.0])
    a[0] += 1
    a[1] += f(r[col["gpu__time_duration.sum"]])
    a[2] += f(r[col["dram__throughput.avg.pct_of_peak_sustained_elapsed"]])
    a[3] += f(r[col["dram__bytes_read.sum"]])
    a[4] += f(r[col["sm__warps_active.avg.pct_of_peak_sustained_active"]])
    a[6] += f(r[col["smsp__warp_issue_stalled_long_scoreboard_per_warp_active.pct"]])
    a[7] += f(r[col["smsp__warp_issue_stalled_barrier_per_warp_active.pct"]])
print(f"{'kernel':40} {'grid':>6} {'n':>3} {'us/each':>8} {'dram%':>6} {'MB/each':>8} {'occ%':>5} {'regs':>4} {'lsb%':>5} {'bar%':>5}")
for (name, grid), a in agg.items():
    n = a[0]
    print(f"{name:40} {grid:>6} {n:>3} {a[1]/n/1e3:8.2f} {a[2]/n:6.1f} {a[3]/n/1e6:8.2f} {a[4]/n:5.1f} {a[5]:>4} {a[6]/n:5.1f} {a[7]/n:5.1f}")
PY
