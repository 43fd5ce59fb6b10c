// Package k8slb is l4lb's Kubernetes controller: it makes l4lb the load
// balancer of a cluster's Services of type LoadBalancer.
//
// The Services it serves are those of type LoadBalancer whose
// spec.loadBalancerClass is its class, or unset when it is the cluster's
// default (Serves). One l4lb of a fleet, elected by a Lease (client-go's
// leader election), allocates each a VIP from the pool (Pool) and writes
// it to status.loadBalancer.ingress through the status subresource, with
// an event on the Service (IPAllocated, or AllocationFailed when the pool
// is exhausted or the address asked for cannot be had). The pool is
// rebuilt from the Services' status at every round, so that a restart or
// a new leader never moves a VIP that is in status. Every l4lb, leader or
// not, turns each served Service with an address in status into l4lb
// services, one per port and address (Translate), whose backends are the
// nodes, and hands them to its balancer.
//
// A Controller's rounds run one at a time, on the goroutine of Run; its
// mutex guards what other goroutines read or replace (the services
// applied, the file's settings), and is never held across a call to the
// API server or to Apply.
package k8slb
