package routing

// SetRand makes r draw runtime fractions from f, which must return a number
// in [0, n).
func SetRand(r *Router, f func(n uint64) uint64) { r.randN = f }
