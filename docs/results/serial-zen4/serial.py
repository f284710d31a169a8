import collections,sys
samples=[];cur=None
for line in open(sys.argv[1]):
    if not line.strip():
        if cur: samples.append(cur); cur=None
        continue
    if line.strip().isdigit():
        cur=(line.split()[0],[])
    elif cur:
        parts=line.split(None,1)
        cur[1].append(parts[1].strip() if len(parts)>1 else '')
if cur: samples.append(cur)
tids=collections.Counter(s[0] for s in samples)
mt=max(tids, key=lambda t: sum(1 for s in samples if s[0]==t and any('Executor<B>::exec' in f for f in s[1])))
st=[s for s in samples if s[0]==mt and any('Executor<B>::exec' in f for f in s[1])]
serial=[s for s in st if not any('Team::run' in f for f in s[1])]
tot=len(samples)
print('all samples',tot,'main in exec',len(st),'serial in exec',len(serial),'= %.2f%% of all samples'%(100*len(serial)/tot))
c=collections.Counter()
for s in serial:
    op=next((f for f in s[1] if ('crossbow_kernels' in f and 'impl' in f) or 'vector::cpu' in f or 'optim' in f or 'Backend>::copy' in f),s[1][0] if s[1] else '?')
    c[op[:120]]+=1
for k,v in c.most_common(12): print('%5.2f%%'%(100*v/tot), k)
