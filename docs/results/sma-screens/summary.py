import json,sys,statistics as st
from collections import defaultdict
runs=[json.loads(l) for l in open(sys.argv[1])]
by=defaultdict(list)
for r in runs: by[(r['phase'],r['variant'],r['learners'],r['lr'])].append(r)
for k in sorted(by, key=lambda k:(k[0],k[2],k[1],k[3])):
    rs=by[k]
    ep=[r['epochs_to_target'] for r in rs]
    fin=[100*r['final_accuracy'] for r in rs]
    print(f"{k[0]:5} k={k[2]} {k[1]:40} lr={k[3]:<7} n={len(rs)} ep={ep} final={['%.1f'%f for f in fin]}")
