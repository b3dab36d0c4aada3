package httpfilter

import "testing"

type needsFilter struct {
	Router
	n Needs
}

func (f needsFilter) Needs() Needs { return f.n }

func TestNeedsOf(t *testing.T) {
	tests := []struct {
		desc    string
		filters []Instance
		want    Needs
	}{
		{desc: "none", want: Needs{}},
		{desc: "router only", filters: []Instance{{Filter: Router{}}}, want: Needs{}},
		{desc: "combined", filters: []Instance{
			{Filter: needsFilter{n: Needs{After: true}}},
			{Filter: needsFilter{n: Needs{ConnState: true}}},
			{Filter: Router{}},
		}, want: Needs{After: true, ConnState: true}},
	}
	for _, tc := range tests {
		t.Run(tc.desc, func(t *testing.T) {
			if got := NeedsOf(tc.filters); got != tc.want {
				t.Errorf("NeedsOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}
