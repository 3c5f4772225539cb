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
#include <linux/if_ether.h>
#include <linux/ip.h>
#include <linux/in.h>
#include <linux/udp.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

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

/*
 * The uplink of a VXLAN port (xbr_xdp_vxlan): only the node's VXLAN traffic
 * goes to xbr, everything else (ARP, ssh, ping, NAT replies) to the kernel.
 *
 * Config, written by xbr before it attaches the program: the node's tunnel
 * address and the VXLAN UDP port, both in network byte order. Until then
 * (all zero) nothing matches and every frame passes to the kernel.
 */
struct xbr_vxlan_cfg {
	__be32 local_ip;
	__be16 dst_port;
	__u16 pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbr_vxlan_cfg);
} vxlan_cfg SEC(".maps");

/* Redirected: untagged IPv4 without options, not a fragment (xbr does not
 * reassemble), UDP to local_ip:dst_port. xbr validates the rest (checksum,
 * lengths, VXLAN flags) and counts what it drops. */
SEC("xdp")
int xbr_xdp_vxlan(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	struct xbr_vxlan_cfg *cfg;
	__u32 zero = 0;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return XDP_PASS;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl != 5)
		return XDP_PASS;
	/* MF set or a non-zero offset: a fragment. */
	if (ip->frag_off & bpf_htons(0x3fff) || ip->protocol != IPPROTO_UDP)
		return XDP_PASS;
	udp = (void *)(ip + 1);
	if ((void *)(udp + 1) > end)
		return XDP_PASS;
	cfg = bpf_map_lookup_elem(&vxlan_cfg, &zero);
	if (!cfg || ip->daddr != cfg->local_ip || udp->dest != cfg->dst_port)
		return XDP_PASS;
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

/* bpf_redirect_map() is not GPL-only, but the flow cache will need helpers
 * that are (bpf_fib_lookup, conntrack kfuncs): declare a GPL-compatible
 * license now so the program's license does not change under users later. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
