// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xbr's XDP program: hands every received frame to the AF_XDP socket that
 * xbr bound to the same rx queue, or to the kernel stack when there is none.
 *
 * The XSKMAP is indexed by rx queue: xbr inserts the socket bound to queue N
 * at key N (see dataplane/src/bpf.rs). A queue without a socket makes
 * bpf_redirect_map() return the fallback action, XDP_PASS, so traffic keeps
 * flowing through the kernel while xbr starts or restarts a port.
 *
 * Later versions grow a flow cache here that redirects hot flows directly to
 * the destination device; the socket redirect stays the slow path.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

/* One entry per rx queue; 256 covers any veth or NIC xbr is expected to drive. */
#define XBR_MAX_QUEUES 256

struct {
	__uint(type, BPF_MAP_TYPE_XSKMAP);
	__uint(max_entries, XBR_MAX_QUEUES);
	__type(key, __u32);
	__type(value, __u32);
} xsks SEC(".maps");

SEC("xdp")
int xbr_xdp_rx(struct xdp_md *ctx)
{
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

/* bpf_redirect_map() is not GPL-only, but the flow cache will need helpers
 * that are (bpf_fib_lookup, conntrack kfuncs): declare a GPL-compatible
 * license now so the program's license does not change under users later. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
