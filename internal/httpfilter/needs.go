package httpfilter

// NeedsReporter is implemented by filters whose steps need more than the
// tap handle.
type NeedsReporter interface {
	Needs() Needs
}

// Needs returns what the instance's steps need (Needs): nothing unless its
// filter reports it.
func (in Instance) Needs() Needs {
	if r, ok := in.Filter.(NeedsReporter); ok {
		return r.Needs()
	}
	return Needs{}
}

// NeedsOf returns what the steps of filters need, together.
func NeedsOf(filters []Instance) Needs {
	var n Needs
	for _, in := range filters {
		fn := in.Needs()
		n.After = n.After || fn.After
		n.ConnState = n.ConnState || fn.ConnState
		n.Events |= fn.Events
		// A filter's calls are its work: a chain with events runs the
		// interceptors that run work.
		n.After = n.After || fn.Events != 0
	}
	return n
}
