#!/usr/bin/env python3
"""devices/phones/derive.py -- how devices/phones/*.tsv and the measured phones of
devices/catalog.yaml come from the public measurements (an analysis tool, not part of fedsim).

    python3 devices/phones/derive.py ../shared/data/devices [devices/phones]

reads the measurement folder (its README.md names every source repository and commit), writes the
data files fedsim reads at run time (ai_benchmark.tsv, bandwidth.tsv) and the time tables the
tests read (ondevice_train.tsv) into the output folder, and prints what devices/catalog.yaml's
measured entries say (the fits, their errors, the power) and the figures quoted in
devices/phones/README.md. Deterministic: the same input gives the same output, byte for byte.
"""
import csv
import json
import math
import os
import sys

SRC = sys.argv[1] if len(sys.argv) > 1 else "../shared/data/devices"
OUT = sys.argv[2] if len(sys.argv) > 2 else os.path.dirname(os.path.abspath(__file__))
CONFIGS = {"MEIZU_Core_f0": "meizu-16t", "MEIZU_Freq_1708800": "meizu-16t-1.7ghz"}
MODELS = ["Lenet", "Alexnet", "GoogLenet", "Squeezenet", "Mobilenet"]
REF_SCORE = 3120  # CPU_F_AI_Score of the Meizu 16s, the 16T's Snapdragon 855 sibling


def read_csv(path):
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


# ---- what fedsim counts for a training step (nn/model.c nn_model_step_cost): 2 FLOPs a MAC for
# the forward GEMMs, the weight gradients and the input gradients of every conv/linear layer but
# the first (the data's gradient is not computed). Per sample, from ondevice/models.md's tables.
def layer_macs(model):
    rows, inside = [], False
    for line in open(os.path.join(SRC, "ondevice", "models.md")):
        if line.startswith("## "):
            inside = line.strip() == "## " + model
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if inside and len(cells) == 6 and cells[4].isdigit():
            rows.append(int(cells[4]))
    return [m for m in rows if m > 0]


def step_flops_per_sample(model):
    macs = layer_macs(model)
    return 2.0 * (2 * sum(macs) + sum(macs[1:]))


# ---- fedsim's fit (devices/profile.c dev_fit_step_cost without the bytes term): minimize
# sum_i ((flops_i / C + o) / t_i - 1)^2, least squares on the relative error.
def fit(flops, secs):
    # normal equations of [u_i v_i] x = 1 with u = flops/t, v = 1/t
    suu = sum((f / t) ** 2 for f, t in zip(flops, secs))
    svv = sum((1 / t) ** 2 for t in secs)
    suv = sum(f / t / t for f, t in zip(flops, secs))
    su = sum(f / t for f, t in zip(flops, secs))
    sv = sum(1 / t for t in secs)
    det = suu * svv - suv * suv
    x0 = (su * svv - sv * suv) / det
    x1 = (suu * sv - suv * su) / det
    if x1 < 0:  # the overhead term kept >= 0, as fedsim's fit keeps it
        x0, x1 = su / suu, 0.0
    return 1 / x0, x1


def main():
    # ---- time tables (expr_train: ms a training step) -> ondevice_train.tsv
    tables = {}
    for folder in CONFIGS:
        for model in MODELS:
            p = os.path.join(SRC, "ondevice", folder, model, "time_table_%s.csv" % model)
            if os.path.exists(p):
                tables[folder, model] = [(int(r["batchsize"]), float(r["expr_train"]))
                                         for r in read_csv(p)]
    with open(os.path.join(OUT, "ondevice_train.tsv"), "w") as f:
        f.write("# devices/phones/ondevice_train.tsv -- measured training time per step on a Meizu 16T\n"
                "# (Snapdragon 855) with MNN, batch 1..32: the expr_train column of\n"
                "# UbiquitousLearning/Benchmark-On-Device-Training tools/train/benchmark/<config>/\n"
                "# processed_data/<model>/time_table_<model>.csv, commit\n"
                "# 1b3cfeb57784c7422b80f4273814692da40efed7 (copied by devices/phones/derive.py).\n"
                "# config: MEIZU_Core_f0 = default governor, MEIZU_Freq_1708800 = fixed 1.7 GHz.\n"
                "config\tmodel\tbatch\tms_per_step\n")
        for (folder, model), rows in tables.items():
            for b, ms in rows:
                f.write("%s\t%s\t%d\t%.6f\n" % (folder, model, b, ms))

    # ---- the fits: LeNet per configuration, the catalog's figures
    print("# per-step FLOPs as fedsim counts them (per sample):")
    for m in MODELS:
        print("#   %-10s %.6g" % (m, step_flops_per_sample(m)))
    fits = {}
    for folder, name in CONFIGS.items():
        rows = tables[folder, "Lenet"]
        f1 = step_flops_per_sample("Lenet")
        C, o = fit([b * f1 for b, _ in rows], [ms / 1e3 for _, ms in rows])
        fits[folder] = (C, o)
        print("# %s (%s): LeNet fit compute %.4g GFLOPS, step_overhead %.4g ms" %
              (name, folder, C / 1e9, o * 1e3))
        for model in MODELS:
            if (folder, model) not in tables:
                continue
            fm = step_flops_per_sample(model)
            errs = ["b%d %+.1f%%" % (b, 100 * ((b * fm / C + o) * 1e3 / ms - 1))
                    for b, ms in tables[folder, model]]
            own = fit([b * fm for b, _ in tables[folder, model]],
                      [ms / 1e3 for _, ms in tables[folder, model]])
            print("#   %-10s with the LeNet fit: %s; own fit %.3g GFLOPS, %.4g ms" %
                  (model, ", ".join(errs), own[0] / 1e9, own[1] * 1e3))

    # ---- memory a job was seen using: max RES over every performance table
    res = 0
    for folder in CONFIGS:
        for model in MODELS:
            p = os.path.join(SRC, "ondevice", folder, model, "performance_%s.csv" % model)
            if os.path.exists(p):
                res = max([res] + [float(r["RES"]) for r in read_csv(p)])
    print("# largest RES of a training process: %.0f MiB" % res)

    # ---- power: J per step / s per step (MEIZU_Freq_1708800 only)
    en = read_csv(os.path.join(SRC, "ondevice", "singleBatch_energy_MEIZU_Freq_1708800.csv"))
    for model in MODELS:
        t = dict(tables["MEIZU_Freq_1708800", model])
        w = [float(r[model]) / (t[int(r[""])] / 1e3) for r in en if int(r[""]) in t]
        print("# power %-10s %s W (mean %.2f)" % (model, " ".join("%.2f" % x for x in w),
                                                   sum(w) / len(w)))

    # ---- AI-Benchmark list -> ai_benchmark.tsv
    bench = json.load(open(os.path.join(SRC, "flash", "raw_ai_benchmark_list.json")))
    with open(os.path.join(OUT, "ai_benchmark.tsv"), "w") as f:
        f.write("# devices/phones/ai_benchmark.tsv -- the AI-Benchmark phone list FLASH ships: 333 records\n"
                "# of PKU-Chengxu/FLASH models/utils/device_util/raw_ai_benchmark_list.json, commit\n"
                "# 70e47eb2a802e1c79e1a9f9f84a4aee818cd15a8 (copied by devices/phones/derive.py): the\n"
                "# phone, its SoC, RAM in GiB, release year and CPU_F_AI_Score (AI-Benchmark's CPU-only\n"
                "# floating-point inference score, unitless). devices.population draws its phones here.\n"
                "model\tcpu\tram_gib\tyear\tcpu_f_score\n")
        for r in bench:
            f.write("%s\t%s\t%s\t%s\t%s\n" % (r["Model"].strip(), r["CPU"].strip(),
                                              r["RAM"].replace("GB", ""), r["Year"],
                                              r["CPU_F_AI_Score"]))
    # ---- bandwidth -> bandwidth.tsv
    speed = json.load(open(os.path.join(SRC, "flash", "speed_distri.json")))
    with open(os.path.join(OUT, "bandwidth.tsv"), "w") as f:
        f.write("# devices/phones/bandwidth.tsv -- measured bandwidth of 19 users: mean and standard\n"
                "# deviation of download and upload, KiB/s (FLASH's code reads them as KB/s), from\n"
                "# PKU-Chengxu/FLASH models/speed_distri.json, commit\n"
                "# 70e47eb2a802e1c79e1a9f9f84a4aee818cd15a8 (copied by devices/phones/derive.py).\n"
                "user\tdown_mean\tdown_sigma\tup_mean\tup_sigma\n")
        for k, v in speed.items():
            f.write("%s\t%.6f\t%.6f\t%.6f\t%.6f\n" % (k, v["down_u"], v["down_sigma"],
                                                    v["up_u"], v["up_sigma"]))
    ups = sorted(v["up_u"] for v in speed.values())
    downs = sorted(v["down_u"] for v in speed.values())
    print("# bandwidth medians: down %.0f KiB/s = %.4g Mbps, up %.0f KiB/s = %.4g Mbps" %
          (downs[9], downs[9] * 8192 / 1e6, ups[9], ups[9] * 8192 / 1e6))

    # ---- the score scaling: time ~ score^-alpha, fitted on FLASH's measured per-batch times
    # (device_util.py get_train_time, in the data README) of Nexus S, Redmi Note 7 Pro, Pixel 4
    flash = {"femnist cnn": (1642, 588, 179), "celeba cnn": (5392, 1355, 561),
             "reddit lstm": (2596, 916, 527.7), "shakespeare lstm": (28621, 13579, 10681)}
    scores = (192, 2057, 3212)
    xs, ys = [], []
    for t in flash.values():
        for i in (0, 1):
            xs.append(math.log(scores[2] / scores[i]))
            ys.append(math.log(t[i] / t[2]))
    alpha = sum(x * y for x, y in zip(xs, ys)) / sum(x * x for x in xs)
    print("# score exponent (time ratio = score ratio^alpha, least squares in logs): %.4f" % alpha)
    a = round(alpha, 2)
    for name, t in flash.items():
        for i, phone in ((0, "Nexus S"), (1, "Redmi Note 7 Pro")):
            pred = (scores[2] / scores[i]) ** a
            print("#   %-16s %-16s / Pixel 4: measured %.2fx, predicted %.2fx (%+.0f%%), "
                  "score alone %.2fx (%+.0f%%)" %
                  (name, phone, t[i] / t[2], pred, 100 * (pred / (t[i] / t[2]) - 1),
                   scores[2] / scores[i], 100 * (scores[2] / scores[i] / (t[i] / t[2]) - 1)))
    sd855 = sorted(int(r["CPU_F_AI_Score"]) for r in bench if "855" in r["CPU"])
    print("# Snapdragon 855 scores: %d phones, %d..%d, median %d; reference %d (Meizu 16s)" %
          (len(sd855), sd855[0], sd855[-1], sd855[len(sd855) // 2], REF_SCORE))


main()
