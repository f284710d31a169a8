import json, statistics as st, sys
# table.py RUN.json...: the BENCHMARKS table of one or more runs, "run1 / run2" cells (a later run may hold some of the rows only)
runs = [json.load(open(f)) for f in sys.argv[1:]]
goal = lambda m, b: 2.0 if m == 'lenet5' else (1.2 if b == 128 else 1.5)
print('peak: ' + ' / '.join('%.0f' % (st.median(r['peak_flops'])/1e9) for r in runs) + ' GFLOP/s')
print('| model | batch | crossbow img/s | PyTorch img/s | ratio | crossbow % of peak | PyTorch % of peak | goal |')
print('|---|---:|---:|---:|---:|---:|---:|---:|')
held = total = 0
for row in runs[0]['rows']:
    cb, pt, ra, cp, pp = [], [], [], [], []
    for r in runs:
        xs = [x for x in r['rows'] if x['model'] == row['model'] and x['batch'] == row['batch']]
        if not xs:
            continue
        x = xs[0]
        c, p = st.median(x['crossbow']), st.median(x['pytorch'])
        peak = st.median(r['peak_flops'])
        g = goal(x['model'], x['batch'])
        ratio = c / p
        total += 1; held += ratio >= g
        cb.append('%.0f' % c); pt.append('%.0f' % p)
        ra.append(('**%.2fx**' if ratio >= g else '%.2fx') % ratio)
        cp.append('%.0f%%' % (100 * c * x['train_flop_per_image'] / peak))
        pp.append('%.0f%%' % (100 * p * x['train_flop_per_image'] / peak))
    print('| %s | %d | %s | %s | %s | %s | %s | %gx |' % (row['model'], row['batch'], ' / '.join(cb), ' / '.join(pt), ' / '.join(ra), ' / '.join(cp), ' / '.join(pp), goal(row['model'], row['batch'])))
print('held %d of %d run-cells' % (held, total))
