"""Per run: the learner counts the tuner settled on (and why), re-tunes, final accuracy."""
import glob
import json

for f in sorted(glob.glob("s*.jsonl")):
    rows = [json.loads(line) for line in open(f)]
    settled, retunes = [], 0
    for r in rows:
        if r.get("event") != "tuner":
            continue
        rep = r["report"]
        if rep["reason"].get("kind") == "throughput_drop":
            retunes += 1
            print(f"{f}: epoch {r['epoch']:.2f}: throughput fell {rep['reason']['drop']:.1%}, re-tuning")
        if rep["decision"] == "settled":
            settled.append((round(r["epoch"], 2), rep["learners"]))
    evals = [r for r in rows if r.get("event") == "eval"]
    print(f"{f}: settled {settled}, re-tunes {retunes}, final accuracy {evals[-1]['test_accuracy']:.2%}")
