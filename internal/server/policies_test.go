package server

import (
	"fmt"
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

// TestPushSettings: a push reads its app's settings as the live file
// gives them (its own, the defaults' where it gives none, the defaults for
// an app the file does not name), and a reload (set) replaces them.
func TestPushSettings(t *testing.T) {
	t.Parallel()
	parse := func(y string) *config.File {
		f, err := config.Parse("toc.yaml", []byte(y))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	lv := &live{allowPrivate: true}
	lv.set(parse("defaults: {signing_secrets: [dddddddddddddddd1], signature: toc}\napps:\n  shop: {signing_secrets: [ssssssssssssssss1], allow_private_targets: false, allowed_hosts: [h.internal]}\n  bank: {}\n"))
	shop, bank, other := lv.push("shop"), lv.push("bank"), lv.push("other")
	if fmt.Sprintf("%v %v %v %v", shop.secrets, shop.signature, shop.policy.AllowPrivate, shop.policy.AllowedHosts) != "[ssssssssssssssss1] toc false [h.internal]" {
		t.Errorf("shop: %v %q %+v", shop.secrets, shop.signature, shop.policy)
	}
	if fmt.Sprintf("%v %v %v", bank.secrets, bank.signature, bank.policy.AllowPrivate) != "[dddddddddddddddd1] toc true" {
		t.Errorf("bank: %v %q %+v", bank.secrets, bank.signature, bank.policy)
	}
	if fmt.Sprintf("%v %v %v", other.secrets, other.signature, other.policy.AllowPrivate) != "[dddddddddddddddd1] toc true" {
		t.Errorf("an app not named: %v %q %+v", other.secrets, other.signature, other.policy)
	}
	if lv.policy("shop").AllowPrivate {
		t.Error("policy(shop) allows private addresses; the file says not")
	}
	lv.set(parse("apps:\n  shop: {signing_secrets: [ssssssssssssssss2]}\n"))
	if got := lv.push("shop").secrets; fmt.Sprint(got) != "[ssssssssssssssss2]" {
		t.Errorf("after a reload, shop's secrets %v; want [ssssssssssssssss2]", got)
	}
	if got := lv.push("bank").secrets; got != nil {
		t.Errorf("after a reload, bank's secrets %v; want none", got)
	}
}
