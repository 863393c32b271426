package engine

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestAppCounts: counts by app in the order the apps came, below and
// beyond the length at which add keeps an index.
func TestAppCounts(t *testing.T) {
	for _, apps := range []int{1, 3, appIndexFrom - 1, appIndexFrom, 3 * appIndexFrom} {
		var c appCounts
		want := map[string]int{}
		var order []string
		for i := range 5 * apps {
			app := fmt.Sprintf("app%d", (i*7)%apps)
			if _, ok := want[app]; !ok {
				order = append(order, app)
			}
			want[app] += i
			c.add(app, i)
		}
		var gotOrder []string
		got := map[string]int{}
		for _, a := range c.list {
			gotOrder = append(gotOrder, a.app)
			got[a.app] += a.n
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%d apps: counts (-want +got):\n%s", apps, diff)
		}
		if diff := cmp.Diff(order, gotOrder); diff != "" {
			t.Errorf("%d apps: order (-want +got):\n%s", apps, diff)
		}
	}
}
