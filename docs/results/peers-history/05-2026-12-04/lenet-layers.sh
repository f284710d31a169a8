for r in 1 2; do for b in base new; do
/tmp/gc-$b --bench 'conv2d_.*/.*lenet' --warm-up-time 1 --measurement-time 2 --noplot 2>&1 | python3 -c "
import sys,re
name=None
for line in sys.stdin:
    m=re.match(r'^(conv2d_\S+/\dt/lenet.*?)\s*(time:.*)?$',line.strip())
    if line.startswith('conv2d_'): name=line.split('time:')[0].strip()
    m=re.search(r'thrpt:\s+\[\S+ \S+ (\S+) (\S+)',line)
    if m and name: print('$b', r'$r', name, m.group(1), m.group(2)); name=None
"
done; done
