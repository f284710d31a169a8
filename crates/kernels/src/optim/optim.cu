// SGD with weight decay and momentum, the learning rate folded into the velocity
// (optim/mod.rs; optim/cpu.rs is the reference):
//   g = grad + wd * p;  v = mu * v - lr * g;  p += nesterov ? mu * v - lr * g : v

extern "C" __global__ void cb_sgd(float* p, const float* grad, float* v, i64 n, float lr, float mu,
                                  float wd, int nesterov) {
    CB_FOR(i, n) {
        float g = grad[i] + wd * p[i];
        float vi = mu * v[i] - lr * g;
        v[i] = vi;
        if (nesterov) {
            p[i] = p[i] + (mu * vi - lr * g);
        } else {
            p[i] = p[i] + vi;
        }
    }
}
