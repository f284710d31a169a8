"""The learner count each run settled on, and the comparisons behind it."""
import glob
import json

for side in ("old", "new"):
    counts = []
    for s in range(1, 7):
        rows = [json.loads(line) for line in open(f"{side}-s{s}.jsonl")]
        settled = [r["report"]["learners"] for r in rows if r.get("event") == "tuner" and r["report"]["decision"] == "settled"]
        counts.append(settled[-1] if settled else None)
    print(f"{side}: settled on {counts} learners (seeds 1-6)")
