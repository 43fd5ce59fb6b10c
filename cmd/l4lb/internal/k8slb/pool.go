package k8slb

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
)

// Errors of the pool, which errors.Is matches.
var (
	ErrExhausted    = errors.New("k8slb: no free address in the pool")
	ErrNotInPool    = errors.New("k8slb: address not in the pool")
	ErrTaken        = errors.New("k8slb: address taken")
	ErrNoFamilyPool = errors.New("k8slb: no prefix of the family in the pool")
)

// Family is an IP family of a Service (spec.ipFamilies).
type Family int

// The families.
const (
	IPv4 Family = 4
	IPv6 Family = 6
)

func (f Family) String() string { return fmt.Sprintf("IPv%d", int(f)) }

// familyOf returns a's family.
func familyOf(a netip.Addr) Family {
	if a.Is4() {
		return IPv4
	}
	return IPv6
}

// A Pool hands out the VIPs of its prefixes to Services, each known by a
// key (NAMESPACE/NAME). Its zero value has no address. A Pool is not safe
// for concurrent use.
type Pool struct {
	prefixes []netip.Prefix
	owner    map[netip.Addr]string   // the addresses given, to their Service
	addrs    map[string][]netip.Addr // each Service's addresses, in the order given
}

// NewPool returns an empty pool of the prefixes, which it searches in the
// order given for the first free address of a family. The prefixes are
// those of config.K8s.Pool: masked, of plain addresses, none overlapping.
func NewPool(prefixes []netip.Prefix) *Pool {
	return &Pool{prefixes: slices.Clone(prefixes), owner: map[netip.Addr]string{}, addrs: map[string][]netip.Addr{}}
}

// Contains reports whether a is an address of the pool: in one of its
// prefixes, and not the first or last of an IPv4 prefix wider than /31
// (the network's and its broadcast address).
func (p *Pool) Contains(a netip.Addr) bool {
	a = a.Unmap()
	for _, pf := range p.prefixes {
		if pf.Contains(a) {
			return !reserved(pf, a)
		}
	}
	return false
}

// reserved reports whether a is the first or last address of an IPv4
// prefix pf wider than /31.
func reserved(pf netip.Prefix, a netip.Addr) bool {
	if !pf.Addr().Is4() || pf.Bits() >= 31 {
		return false
	}
	return a == pf.Addr() || a == last(pf)
}

// last returns the last address of pf.
func last(pf netip.Prefix) netip.Addr {
	b := pf.Addr().AsSlice()
	for i := pf.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// Owner returns the Service that holds a, or "".
func (p *Pool) Owner(a netip.Addr) string { return p.owner[a.Unmap()] }

// Addrs returns the addresses the Service key holds, in the order given.
func (p *Pool) Addrs(key string) []netip.Addr { return slices.Clone(p.addrs[key]) }

// Assign gives a to the Service key, as its status has it: an error
// wrapping ErrNotInPool or ErrTaken (by another Service) if it cannot.
// Assigning a Service an address it holds does nothing. Cost: O(prefixes).
func (p *Pool) Assign(key string, a netip.Addr) error {
	a = a.Unmap()
	switch o := p.owner[a]; {
	case o == key:
		return nil
	case !p.Contains(a):
		return fmt.Errorf("%w: %v", ErrNotInPool, a)
	case o != "":
		return fmt.Errorf("%w: %v is %s's", ErrTaken, a, o)
	}
	p.owner[a] = key
	p.addrs[key] = append(p.addrs[key], a)
	return nil
}

// Allocate gives the Service key an address of each family of fams,
// unless it holds one already: the address of that family in requested,
// when one is, or else the first free one of the family, walking the
// prefixes in order and each from its first address. With required
// false, a family the pool cannot serve is left out, as long as one is
// given (PreferDualStack); with required true, every family must be
// (SingleStack, RequireDualStack), or nothing is given. It returns the
// Service's addresses, or an error wrapping ErrNotInPool, ErrTaken,
// ErrExhausted or ErrNoFamilyPool. Cost: O(prefixes + addresses given)
// a family.
func (p *Pool) Allocate(key string, fams []Family, requested []netip.Addr, required bool) ([]netip.Addr, error) {
	var got []netip.Addr
	var firstErr error
	for _, f := range fams {
		if slices.ContainsFunc(p.addrs[key], func(a netip.Addr) bool { return familyOf(a) == f }) {
			continue
		}
		a, err := p.pick(key, f, requested)
		if err != nil {
			if required {
				for _, g := range got {
					p.release(key, g)
				}
				return nil, err
			}
			firstErr = cmpErr(firstErr, err)
			continue
		}
		got = append(got, a)
		p.owner[a] = key
		p.addrs[key] = append(p.addrs[key], a)
	}
	if len(p.addrs[key]) == 0 {
		if firstErr == nil {
			firstErr = fmt.Errorf("%w: no family asked for", ErrNoFamilyPool)
		}
		return nil, firstErr
	}
	return p.Addrs(key), nil
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// pick returns the address of family f for key: requested's of f, or
// the first free one.
func (p *Pool) pick(key string, f Family, requested []netip.Addr) (netip.Addr, error) {
	for _, r := range requested {
		r = r.Unmap()
		if familyOf(r) != f {
			continue
		}
		switch o := p.owner[r]; {
		case !p.Contains(r):
			return netip.Addr{}, fmt.Errorf("%w: %v asked for", ErrNotInPool, r)
		case o != "" && o != key:
			return netip.Addr{}, fmt.Errorf("%w: %v asked for is %s's", ErrTaken, r, o)
		}
		return r, nil
	}
	has := false
	for _, pf := range p.prefixes {
		if familyOf(pf.Addr()) != f {
			continue
		}
		has = true
		for a := pf.Addr(); a.IsValid() && pf.Contains(a); a = a.Next() {
			if p.owner[a] == "" && !reserved(pf, a) {
				return a, nil
			}
		}
	}
	if !has {
		return netip.Addr{}, fmt.Errorf("%w: %v", ErrNoFamilyPool, f)
	}
	return netip.Addr{}, fmt.Errorf("%w: %v", ErrExhausted, f)
}

// Release takes back the Service key's addresses. Cost: O(its addresses).
func (p *Pool) Release(key string) {
	for _, a := range p.addrs[key] {
		delete(p.owner, a)
	}
	delete(p.addrs, key)
}

// release takes back one address of key.
func (p *Pool) release(key string, a netip.Addr) {
	delete(p.owner, a)
	p.addrs[key] = slices.DeleteFunc(p.addrs[key], func(b netip.Addr) bool { return b == a })
	if len(p.addrs[key]) == 0 {
		delete(p.addrs, key)
	}
}
