// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * The benchmark's reference switch: the kernel's XDP redirect from one
 * veth to another through a devmap, no lookup. What any switch on this
 * path can reach at most.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} redirect_port SEC(".maps");

SEC("xdp")
int xbrb_redirect(struct xdp_md *ctx)
{
	return bpf_redirect_map(&redirect_port, 0, XDP_DROP);
}

/*
 * The decapsulation reference: strips the outer Ethernet, IPv4, UDP and
 * VXLAN headers (50 bytes, no options: the generator's frames) and
 * redirects the inner frame like xbrb_redirect. No checks at all: the
 * least work a VXLAN decap in XDP can do.
 */
#define VXLAN_OVERHEAD 50

SEC("xdp")
int xbrb_decap_redirect(struct xdp_md *ctx)
{
	if (bpf_xdp_adjust_head(ctx, VXLAN_OVERHEAD))
		return XDP_DROP;
	return bpf_redirect_map(&redirect_port, 0, XDP_DROP);
}

char _license[] SEC("license") = "Dual BSD/GPL";
