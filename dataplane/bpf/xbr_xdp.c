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
 * In front of the socket sits the flow cache (xbr_fc_*, below): frames
 * whose exact headers xbr has translated before, into actions the kernel
 * can carry out, are forwarded or dropped here; the socket is the slow path.
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

/*
 * The flow cache (see dataplane/src/xdpcache/mod.rs for the full design).
 *
 * fc_flows maps the exact headers of a frame (ingress ifindex, Ethernet
 * addresses, IPv4 addresses, protocol, TOS, TTL, L4 ports or ICMP
 * type/code) to what xbr's pipeline did with it: redirect to a device
 * (through fc_devs, optionally rewriting the Ethernet addresses) or drop.
 * Only frames whose flow key those fields determine completely are looked
 * up: untagged IPv4 without options, not a fragment, TCP/UDP/ICMP with the
 * L4 fields present. Everything else, and every miss, goes to xbr.
 *
 * Invalidation: fc_gen[0] is the current generation; xbr bumps it on every
 * flow, group or port change before it acknowledges the change (barrier
 * reply), and an entry is used only if it carries that generation. 0
 * means the cache is off: nothing is looked up.
 *
 * Counters: the value is per CPU, so hits add to it without atomics; xbr
 * sums the CPUs and credits the flows and ports the entry stands for.
 *
 * Conntrack entries (XBR_FC_CT): translations through ct() of established
 * connections; only TCP segments with ACK and without SYN, FIN or RST are
 * forwarded from them, the rest must reach xbr's conntrack.
 *
 * Checksums left to offload: a pod's veth has TX checksum offload on, so
 * its TCP/UDP checksum field holds only the pseudo-header sum (the skb was
 * CHECKSUM_PARTIAL, a state XDP does not see and a redirected frame does
 * not keep). On a hit that redirects such a frame, the program completes
 * the checksum over the segment first (xbr_complete_csum), as xbr's packet
 * thread does for the frames it forwards (src/csum.rs).
 *
 * Layouts must match src/xdpcache/entry.rs byte for byte.
 */
struct xbr_fc_key {
	__u32 ifindex;
	__u8 eth_dst[6];
	__u8 eth_src[6];
	__be32 ip_src;
	__be32 ip_dst;
	__u8 proto;
	__u8 tos;
	__u8 ttl;
	__u8 pad;
	__be16 tp_src; /* ICMP: type, code */
	__be16 tp_dst;
};

#define XBR_FC_REDIRECT 1
#define XBR_FC_DROP 2
#define XBR_FC_SET_DST 1
#define XBR_FC_SET_SRC 2
/* The translation went through conntrack: TCP segments that may change the
 * connection's state (SYN, FIN, RST, or no ACK) go to xbr, whose conntrack
 * must see them (dataplane/src/conntrack/xdp_link.rs). */
#define XBR_FC_CT 4

#define TCP_FIN 0x01
#define TCP_SYN 0x02
#define TCP_RST 0x04
#define TCP_ACK 0x10

struct xbr_fc_val {
	__u64 gen;
	__u64 packets;
	__u64 bytes;
	__u32 out_ifindex;
	__u8 action;
	__u8 flags;
	__u8 eth_dst[6];
	__u8 eth_src[6];
	__u8 pad[6];
};

/* Sized by xbr when it creates the maps (--xdp-cache-size); these are the
 * sizes of the unused copies a program without the cache gets. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbr_fc_key);
	__type(value, struct xbr_fc_val);
} fc_flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_DEVMAP_HASH);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} fc_devs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} fc_gen SEC(".maps");

#define IPPROTO_ICMP_ 1

static __always_inline __u16 fold16(__u32 sum)
{
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return (__u16)sum;
}

/*
 * Completing a checksum left to offload. The segment is summed with
 * bpf_csum_diff (the kernel's csum_partial), which takes at most 512 bytes
 * a call, in sizes that are multiples of 4: full 512-byte chunks in a
 * bounded loop, then one chunk per set bit of the rest (256 ... 4), then
 * the last 2 and 1 bytes by hand. Each tail chunk's offset is computed from
 * the length alone (the bits above its own), not by advancing a pointer,
 * so the verifier's paths join again after every step instead of
 * multiplying.
 *
 * Up to XBR_CSUM_MAX bytes: the segment of a 9000-byte jumbo frame's IP
 * packet (8980) fits; longer segments go to xbr. A veth with an XDP
 * program that does not take multi-buffer frames has a smaller MTU than
 * that anyway.
 */
#define XBR_CSUM_CHUNK 512
#define XBR_CSUM_CHUNKS 18
#define XBR_CSUM_MAX (XBR_CSUM_CHUNK * XBR_CSUM_CHUNKS)
/* Offsets in the segment, masked so that the verifier sees them bounded
 * (a power of two above XBR_CSUM_MAX: the mask never changes one). */
#define XBR_CSUM_OFF_MASK 0x3fff

/* A chunk of n bytes (a power of two below 512) if len has bit n: it
 * starts after the bits of len above n. Returns -1 if it is not all in
 * the frame. */
#define XBR_CSUM_TAIL(n)                                                  \
	if (len & (n)) {                                                      \
		p = l4 + ((len & ~(__u32)(2 * (n) - 1)) & XBR_CSUM_OFF_MASK); \
		if (p + (n) > (__u8 *)end)                                        \
			return -1;                                                \
		sum = bpf_csum_diff(NULL, 0, (__be32 *)p, (n), (__u32)sum);       \
		if (sum < 0)                                                      \
			return -1;                                                \
	}

/*
 * Writes the complete checksum of the len-byte TCP/UDP segment at l4, whose
 * checksum field (at csum_off) holds the pseudo-header sum. Sums are kept
 * in memory order, as csum_partial does, and the result is stored so.
 * Returns 0, or -1 to leave the frame to xbr (truncated, too long).
 */
static __always_inline int xbr_complete_csum(__u8 *l4, void *end, __u32 len, __u32 csum_off,
					     int udp)
{
	__s64 sum = 0;
	__u64 total;
	__u16 *field, seg, csum, last;
	__u8 *p;
	__u32 i;

	if (len > XBR_CSUM_MAX || len < csum_off + 2)
		return -1;
	for (i = 0; i < XBR_CSUM_CHUNKS; i++) {
		if ((i + 1) * XBR_CSUM_CHUNK > len)
			break;
		p = l4 + i * XBR_CSUM_CHUNK;
		if (p + XBR_CSUM_CHUNK > (__u8 *)end)
			return -1;
		sum = bpf_csum_diff(NULL, 0, (__be32 *)p, XBR_CSUM_CHUNK, (__u32)sum);
		if (sum < 0)
			return -1;
	}
	XBR_CSUM_TAIL(256)
	XBR_CSUM_TAIL(128)
	XBR_CSUM_TAIL(64)
	XBR_CSUM_TAIL(32)
	XBR_CSUM_TAIL(16)
	XBR_CSUM_TAIL(8)
	XBR_CSUM_TAIL(4)
	total = (__u32)sum;
	if (len & 2) {
		p = l4 + ((len & ~(__u32)3) & XBR_CSUM_OFF_MASK);
		if (p + 2 > (__u8 *)end)
			return -1;
		total += *(__u16 *)p;
	}
	if (len & 1) {
		/* The odd last byte is the first of a word padded with zero. */
		p = l4 + ((len & ~(__u32)1) & XBR_CSUM_OFF_MASK);
		if (p + 1 > (__u8 *)end)
			return -1;
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
		last = p[0];
#else
		last = (__u16)p[0] << 8;
#endif
		total += last;
	}
	/* Twice: the first fold may carry into bit 32. Then to 16 bits, so
	 * that adding the field below cannot overflow. */
	total = (total & 0xffffffff) + (total >> 32);
	total = (total & 0xffffffff) + (total >> 32);
	seg = fold16((__u32)total);
	field = (__u16 *)(l4 + (csum_off & 31));
	if ((void *)(field + 1) > end)
		return -1;
	/* The sum includes the field, i.e. the pseudo-header sum: if the
	 * segment already verifies, its checksum happens to equal that sum
	 * and stays. */
	if (fold16((__u32)seg + *field) == 0xffff)
		return 0;
	csum = ~seg;
	/* UDP: 0 means "no checksum"; the complete 0 is sent as 0xffff. */
	if (udp && csum == 0)
		csum = 0xffff;
	*field = csum;
	return 0;
}

/* Returns the XDP action for a hit, or -1 for "ask xbr". */
static __always_inline int fc_lookup(struct xdp_md *ctx, __u64 gen)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	__u8 *l4;
	struct xbr_fc_key key;
	struct xbr_fc_val *v;
	__u8 tcp_flags = 0;
	/* The L4 checksum holds only the pseudo-header sum (see above). */
	int partial = 0;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl != 5)
		return -1;
	if (ip->frag_off & bpf_htons(0x3fff))
		return -1;
	l4 = (void *)(ip + 1);
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) {
		/* A sender that left the checksum to offload wrote the
		 * pseudo-header sum: completed below if the frame is
		 * redirected. The test is the packet thread's (src/csum.rs);
		 * a complete checksum costs only this comparison. */
		__u16 stored, l4_len = bpf_ntohs(ip->tot_len);
		__u32 sum;

		if (ip->protocol == IPPROTO_TCP) {
			if (l4 + 18 > (__u8 *)end)
				return -1;
			stored = (__u16)l4[16] << 8 | l4[17];
			tcp_flags = l4[13];
		} else {
			if (l4 + 8 > (__u8 *)end)
				return -1;
			stored = (__u16)l4[6] << 8 | l4[7];
		}
		if (l4_len < 20)
			return -1;
		l4_len -= 20;
		sum = (bpf_ntohl(ip->saddr) >> 16) + (bpf_ntohl(ip->saddr) & 0xffff) +
		      (bpf_ntohl(ip->daddr) >> 16) + (bpf_ntohl(ip->daddr) & 0xffff) +
		      ip->protocol + l4_len;
		partial = stored == fold16(sum) && !(stored == 0 && ip->protocol == IPPROTO_UDP);
	} else if (ip->protocol == IPPROTO_ICMP_) {
		if (l4 + 2 > (__u8 *)end)
			return -1;
	} else {
		return -1;
	}

	__builtin_memset(&key, 0, sizeof(key));
	key.ifindex = ctx->ingress_ifindex;
	__builtin_memcpy(key.eth_dst, eth->h_dest, 6);
	__builtin_memcpy(key.eth_src, eth->h_source, 6);
	key.ip_src = ip->saddr;
	key.ip_dst = ip->daddr;
	key.proto = ip->protocol;
	key.tos = ip->tos;
	key.ttl = ip->ttl;
	if (ip->protocol == IPPROTO_ICMP_) {
		key.tp_src = bpf_htons(l4[0]);
		key.tp_dst = bpf_htons(l4[1]);
	} else {
		/* Checked above, but the compiler may merge the paths. */
		if (l4 + 4 > (__u8 *)end)
			return -1;
		__builtin_memcpy(&key.tp_src, l4, 2);
		__builtin_memcpy(&key.tp_dst, l4 + 2, 2);
	}

	v = bpf_map_lookup_elem(&fc_flows, &key);
	if (!v || v->gen != gen)
		return -1;
	if ((v->flags & XBR_FC_CT) && key.proto == IPPROTO_TCP &&
	    (tcp_flags & (TCP_SYN | TCP_FIN | TCP_RST | TCP_ACK)) != TCP_ACK)
		return -1;
	if (v->action == XBR_FC_DROP) {
		v->packets++;
		v->bytes += (__u64)(end - data);
		return XDP_DROP;
	}
	/* Before counting: a frame left to xbr is counted there. The
	 * Ethernet rewrites below do not touch the segment. */
	if (partial) {
		__u16 l4_len = bpf_ntohs(ip->tot_len) - 20;

		if (xbr_complete_csum(l4, end, l4_len, key.proto == IPPROTO_TCP ? 16 : 6,
				      key.proto == IPPROTO_UDP) < 0)
			return -1;
	}
	v->packets++;
	v->bytes += (__u64)(end - data);
	if (v->flags & XBR_FC_SET_DST)
		__builtin_memcpy(eth->h_dest, v->eth_dst, 6);
	if (v->flags & XBR_FC_SET_SRC)
		__builtin_memcpy(eth->h_source, v->eth_src, 6);
	return bpf_redirect_map(&fc_devs, v->out_ifindex, 0);
}

SEC("xdp")
int xbr_xdp_rx(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *gen = bpf_map_lookup_elem(&fc_gen, &zero);

	if (gen && *gen) {
		int act = fc_lookup(ctx, *gen);

		if (act >= 0)
			return act;
	}
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
