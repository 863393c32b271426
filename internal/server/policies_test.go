package server

import (
	"testing"

	"github.com/toc-dev/toc/internal/config"
)

// TestPoliciesWeight: an app's weight in the file reaches the engine's
// policy, the defaults' for apps that give none.
func TestPoliciesWeight(t *testing.T) {
	t.Parallel()
	f, err := config.Parse("toc.yaml", []byte("defaults: {weight: 3}\napps:\n  shop: {weight: 2}\n  bank: {}\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := policies(f)
	if p.Apps["shop"].Weight != 2 || p.Apps["bank"].Weight != 3 || p.Default.Weight != 3 {
		t.Errorf("weights: shop %d, bank %d, default %d; want 2, 3, 3", p.Apps["shop"].Weight, p.Apps["bank"].Weight, p.Default.Weight)
	}
}
