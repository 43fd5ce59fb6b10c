package balancer

import (
	"errors"
	"maps"
	"slices"
	"strings"

	"github.com/maglevlb/maglev/xdpmaglev"
)

// Adopt says where the data plane is pinned, and whether it was adopted
// from an earlier l4lb: if so, the balancer keeps the services that l4lb
// left where they are until an Apply takes them over (a service it starts
// begins from what the data plane holds), or Prune deletes them.
func (b *Balancer) Adopt() {
	if b.lb.PinPath() == "" {
		return
	}
	if !b.lb.Adopted() {
		b.logger.Info("data plane pinned", "path", b.lb.PinPath())
		return
	}
	b.mu.Lock()
	b.kept = map[xdpmaglev.Service]bool{}
	for _, s := range b.lb.Services() {
		b.kept[s] = true
	}
	b.mu.Unlock()
	b.logger.Info("adopted the pinned data plane: its connection tracking, tables and counters go on", "path", b.lb.PinPath())
}

// Prune deletes, once the first Apply has succeeded, the services an
// earlier l4lb left in the data plane that the configuration does not
// hold.
func (b *Balancer) Prune() error {
	b.mu.Lock()
	kept := slices.Collect(maps.Keys(b.kept))
	b.kept = nil
	b.mu.Unlock()
	slices.SortFunc(kept, func(x, y xdpmaglev.Service) int { return strings.Compare(x.String(), y.String()) })
	for _, s := range kept {
		if err := b.lb.DeleteService(s); err != nil && !errors.Is(err, xdpmaglev.ErrNoService) {
			return err
		}
		b.logger.Info("service deleted: an earlier l4lb left it, and the configuration does not hold it", "vip", s.String())
	}
	return nil
}
