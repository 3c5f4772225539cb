// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xbr's XDP program: hands every received frame to the AF_XDP socket that
 * xbr bound to the same rx queue, or to the kernel stack when there is none.
 *
 * The XSKMAP is indexed by rx queue: xbr inserts the socket bound to queue N
 * at key N (see dataplane/src/fastpath/loader/mod.rs). A queue without a
 * socket (xbr is starting, restarting or dead: the program is pinned and
 * outlives it, see dataplane/src/fastpath/pin/mod.rs) makes
 * bpf_redirect_map() return the fallback action. A port's frames never reach the host stack (xbr_xdp_rx: the
 * fallback is XDP_DROP, counted in closed_drops), as in OVS, whose kernel
 * datapath takes every frame of a port; only the uplink of a VXLAN port
 * (xbr_xdp_vxlan) passes what is not its bridge's to the kernel.
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
 * The flow cache (see dataplane/src/fastpath/cache/mod.rs for the full design).
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
 * Counters: hits add to the entry's packets and bytes atomically (an
 * uncontended add: a flow is mostly handled on one CPU at a time); xbr
 * credits the flows and ports the entry stands for. One value for all
 * CPUs, not one per CPU: a per-CPU map preallocates entries x CPUs
 * values, hundreds of megabytes of kernel memory on a large node.
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
 * thread does for the frames it forwards (packet/src/csum.rs).
 *
 * Jumbo frames arrive in several buffers (xdp.frags); the program sees the
 * first, which holds every header it reads or rewrites, and reads the rest
 * through helpers to complete a checksum. Entries forward them only to a
 * device that takes multi-buffer frames (XBR_FC_FRAGS).
 *
 * VXLAN: the uplink program of a VXLAN port (xbr_xdp_vxlan) looks up the
 * inner frame of each valid VXLAN packet, keyed with its tunnel source and
 * VNI, and strips the outer headers on a hit; an entry with XBR_FC_ENCAP
 * writes the outer headers it holds in front of the frame before it
 * redirects to the uplink.
 *
 * New UDP connections: a frame that misses the entries may be forwarded
 * by a template, creating its connection (xbr_ct_new.h).
 *
 * Layouts must match ../cache/entry.rs byte for byte. The maps xbr pins
 * (fc_flows, fc_devs, fc_gen, closed_drops) outlive the process and are
 * adopted by the next xbr: a change to their keys, values or meaning must
 * bump LAYOUT in ../pin/layout.rs, so that no build adopts maps it would
 * misread.
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
	/* Frames decapsulated from a VXLAN port's uplink: the outer source
	 * (tun_src) and the VNI (tun_id); zero for every other frame. The
	 * outer destination is the port's local_ip, which the uplink program
	 * selects on, so the ingress ifindex implies it. */
	__be32 tun_src;
	__be32 vni;
};

#define XBR_FC_REDIRECT 1
#define XBR_FC_DROP 2
#define XBR_FC_SET_DST 1
#define XBR_FC_SET_SRC 2
/* The translation went through conntrack: TCP segments that may change the
 * connection's state (SYN, FIN, RST, or no ACK) go to xbr, whose conntrack
 * must see them (dataplane/src/conntrack/xdp_link.rs). */
#define XBR_FC_CT 4
/* Encapsulate in VXLAN before the redirect (to the uplink): the value's
 * outer headers (encap) are written in front of the frame. */
#define XBR_FC_ENCAP 8
/* Rewrite IPv4 addresses and L4 ports (nw_src ... tp_dst) with
 * incremental checksum updates. */
#define XBR_FC_SET_NW 16
/* The output device takes frames in several buffers (NDO_XMIT_SG): frames
 * larger than a page (jumbo MTUs) may hit. The kernel drops a multi-buffer
 * frame redirected to a device without it, counting it nowhere. */
#define XBR_FC_FRAGS 32

/* Outer Ethernet + IPv4 + UDP + VXLAN. */
#define XBR_VXLAN_OUTER 50
#define XBR_OUTER_IP_AT 14
#define XBR_OUTER_UDP_AT 34

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
	/* XBR_FC_ENCAP: outer Ethernet, IPv4, UDP and VXLAN headers towards
	 * the remote VTEP with the VNI and UDP source port of this flow; IPv4
	 * total length, id and checksum and UDP length are zero, filled per
	 * frame. */
	__u8 encap[XBR_VXLAN_OUTER];
	__u8 pad2[2];
	/* One's-complement sum of the outer IPv4 header as stored. */
	__u32 encap_ip_sum;
	/* Longest inner frame the uplink MTU takes; longer ones go to xbr,
	 * which drops and counts them. */
	__u16 encap_max_inner;
	__u8 pad3[6];
	/* XBR_FC_SET_NW: the IPv4 addresses and TCP/UDP ports the frame
	 * leaves with (set_field, or NAT through ct()); ICMP frames keep
	 * their type and code. */
	__be32 nw_src;
	__be32 nw_dst;
	__be16 tp_src;
	__be16 tp_dst;
	__u8 pad4[4];
};

/* Sized by xbr when it creates the maps (--xdp-cache-size); these are the
 * sizes of the unused copies a program without the cache gets. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
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
 * Stores the checksum of a segment whose one's-complement sum, the
 * checksum field included, is total, in the field (in memory order).
 */
static __always_inline void xbr_store_csum(__u16 *field, __u64 total, int udp)
{
	__u16 seg, csum;

	/* Twice: the first fold may carry into bit 32. Then to 16 bits, so
	 * that adding the field below cannot overflow. */
	total = (total & 0xffffffff) + (total >> 32);
	total = (total & 0xffffffff) + (total >> 32);
	seg = fold16((__u32)total);
	/* The sum includes the field, i.e. the pseudo-header sum: if the
	 * segment already verifies, its checksum happens to equal that sum
	 * and stays. */
	if (fold16((__u32)seg + *field) == 0xffff)
		return;
	csum = ~seg;
	/* UDP: 0 means "no checksum"; the complete 0 is sent as 0xffff. */
	if (udp && csum == 0)
		csum = 0xffff;
	*field = csum;
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
	__u16 *field, last;
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
	field = (__u16 *)(l4 + (csum_off & 31));
	if ((void *)(field + 1) > end)
		return -1;
	xbr_store_csum(field, total, udp);
	return 0;
}

/*
 * A frame in several buffers: the program reads only the first directly,
 * so the segment is copied 512 bytes at a time (bpf_xdp_load_bytes) into
 * this CPU's scratch buffer and summed there. Each chunk starts at an
 * even offset of the segment, so chunk sums add up to the segment's; the
 * bytes after a short last chunk, up to a multiple of 4, are zeroed first,
 * which also pads an odd last byte as the one-buffer version does. The 4
 * spare bytes keep that padding inside the buffer for the verifier.
 */
struct xbr_csum_scratch {
	__u8 b[XBR_CSUM_CHUNK + 4];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbr_csum_scratch);
} csum_scratch SEC(".maps");

/*
 * As xbr_complete_csum for a frame in several buffers: the segment of len
 * bytes starts l4_off bytes into the frame, and its checksum field (in the
 * first buffer, checked by the caller) is at field.
 */
static __always_inline int xbr_complete_csum_frags(struct xdp_md *ctx, __u32 l4_off, __u32 len,
						   __u16 *field, int udp)
{
	__u32 zero = 0, i, n;
	struct xbr_csum_scratch *buf = bpf_map_lookup_elem(&csum_scratch, &zero);
	__s64 sum = 0;

	if (!buf || len > XBR_CSUM_MAX)
		return -1;
	for (i = 0; i < XBR_CSUM_CHUNKS; i++) {
		if (i * XBR_CSUM_CHUNK >= len)
			break;
		n = len - i * XBR_CSUM_CHUNK;
		if (n > XBR_CSUM_CHUNK)
			n = XBR_CSUM_CHUNK;
		/* 1..512 whatever the verifier knows of len: never changes n. */
		n = ((n - 1) & (XBR_CSUM_CHUNK - 1)) + 1;
		*(__u32 *)(buf->b + (n & (XBR_CSUM_CHUNK - 4))) = 0;
		if (bpf_xdp_load_bytes(ctx, l4_off + i * XBR_CSUM_CHUNK, buf->b, n) < 0)
			return -1;
		sum = bpf_csum_diff(NULL, 0, (__be32 *)buf->b, (n + 3) & ~3u, (__u32)sum);
		if (sum < 0)
			return -1;
	}
	xbr_store_csum(field, (__u32)sum, udp);
	return 0;
}

/*
 * Writes the outer headers of an XBR_FC_ENCAP entry at o, in front of an
 * inner frame of inner_len bytes: the stored headers, then the words that
 * depend on the frame, as src/vxlan/encap.rs's Template::write does. The
 * IPv4 id is the entry's packet count: DF is set, so it only has to vary
 * (RFC 6864).
 */
static __always_inline void xbr_write_outer(__u8 *o, struct xbr_fc_val *v, __u32 inner_len)
{
	__u16 total = (__u16)(inner_len + XBR_VXLAN_OUTER - XBR_OUTER_IP_AT);
	__u16 id = (__u16)v->packets;
	__u16 csum = ~fold16(v->encap_ip_sum + total + id);

	__builtin_memcpy(o, v->encap, XBR_VXLAN_OUTER);
	o[XBR_OUTER_IP_AT + 2] = total >> 8;
	o[XBR_OUTER_IP_AT + 3] = total & 0xff;
	o[XBR_OUTER_IP_AT + 4] = id >> 8;
	o[XBR_OUTER_IP_AT + 5] = id & 0xff;
	o[XBR_OUTER_IP_AT + 10] = csum >> 8;
	o[XBR_OUTER_IP_AT + 11] = csum & 0xff;
	total -= 20;
	o[XBR_OUTER_UDP_AT + 4] = total >> 8;
	o[XBR_OUTER_UDP_AT + 5] = total & 0xff;
}

/* One's-complement sum terms replacing old by new (RFC 1624, eqn. 3),
 * values in host order. */
static __always_inline __u32 csum_swap32(__u32 sum, __u32 old, __u32 new)
{
	return sum + ((~old >> 16) & 0xffff) + (~old & 0xffff) + (new >> 16) + (new & 0xffff);
}

static __always_inline __u32 csum_swap16(__u32 sum, __u16 old, __u16 new)
{
	return sum + ((~old) & 0xffff) + new;
}

/*
 * Rewrites the IPv4 addresses and, for TCP/UDP, the ports of the frame
 * whose IPv4 header is at ip to the entry's (XBR_FC_SET_NW), updating the
 * IPv4 checksum and the TCP/UDP one (pseudo-header and ports) as
 * packet/src/rewrite/ does: a UDP checksum of 0 (none) stays 0, a computed 0
 * is sent as 0xffff. Returns -1 if the headers are not all in the frame.
 */
static __always_inline int xbr_set_nw(struct iphdr *ip, void *end, struct xbr_fc_val *v)
{
	__u8 *l4 = (void *)(ip + 1);
	__u32 os = bpf_ntohl(ip->saddr), od = bpf_ntohl(ip->daddr);
	__u32 ns = bpf_ntohl(v->nw_src), nd = bpf_ntohl(v->nw_dst);
	__u32 sum;
	__u16 check;

	if ((void *)(ip + 1) > end)
		return -1;
	sum = csum_swap32(csum_swap32((~bpf_ntohs(ip->check)) & 0xffff, os, ns), od, nd);
	ip->check = bpf_htons(~fold16(sum));
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) {
		__u16 *field, op0, op1, np0 = bpf_ntohs(v->tp_src), np1 = bpf_ntohs(v->tp_dst);
		int udp = ip->protocol == IPPROTO_UDP;

		if (l4 + (udp ? 8 : 18) > (__u8 *)end)
			return -1;
		field = (__u16 *)(l4 + (udp ? 6 : 16));
		op0 = (__u16)l4[0] << 8 | l4[1];
		op1 = (__u16)l4[2] << 8 | l4[3];
		if (!(udp && *field == 0)) {
			sum = csum_swap32((~bpf_ntohs(*field)) & 0xffff, os, ns);
			sum = csum_swap32(sum, od, nd);
			sum = csum_swap16(csum_swap16(sum, op0, np0), op1, np1);
			check = ~fold16(sum);
			if (udp && check == 0)
				check = 0xffff;
			*field = bpf_htons(check);
		}
		l4[0] = np0 >> 8;
		l4[1] = np0 & 0xff;
		l4[2] = np1 >> 8;
		l4[3] = np1 & 0xff;
	}
	ip->saddr = v->nw_src;
	ip->daddr = v->nw_dst;
	return 0;
}

#include "xbr_ct_new.h"


/*
 * Returns the XDP action for a hit, or -1 for "ask xbr". The frame to
 * look up starts off bytes into the packet: 0, or XBR_VXLAN_OUTER for
 * the inner frame of a VXLAN packet whose outer headers the uplink
 * program checked (tun_src and vni are then its tunnel metadata, else
 * zero). A hit on such a frame strips the outer headers.
 */
static __always_inline int fc_lookup(struct xdp_md *ctx, __u64 gen, const __u32 off,
				     __be32 tun_src, __be32 vni)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data + off;
	struct iphdr *ip;
	__u8 *l4;
	struct xbr_fc_key key;
	struct xbr_fc_val *v;
	__u8 tcp_flags = 0;
	__u32 inner_len, frame_len = (__u32)(end - data);
	/* The L4 checksum holds only the pseudo-header sum (see above). */
	int partial = 0;
	/* The frame is in several buffers (larger than a page). */
	int frags = 0;

	if ((void *)(eth + 1) > end || eth->h_proto != bpf_htons(ETH_P_IP))
		return -1;
	ip = (void *)(eth + 1);
	if ((void *)(ip + 1) > end || ip->version != 4 || ip->ihl != 5)
		return -1;
	/* A frame in several buffers (larger than a page: a jumbo MTU): the
	 * program sees only its first buffer, which holds every header it
	 * reads or rewrites; the checksum completion reads the rest through
	 * a helper. Its IP packet runs past that buffer, which is cheaper to
	 * test than calling bpf_xdp_get_buff_len() for every frame. A
	 * truncated packet is left to xbr. */
	if (bpf_ntohs(ip->tot_len) > (__u64)(end - (void *)ip)) {
		frame_len = bpf_xdp_get_buff_len(ctx);
		if ((__u64)off + ETH_HLEN + bpf_ntohs(ip->tot_len) > frame_len)
			return -1;
		frags = 1;
	}
	if (ip->frag_off & bpf_htons(0x3fff))
		return -1;
	l4 = (void *)(ip + 1);
	if (ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) {
		/* A sender that left the checksum to offload wrote the
		 * pseudo-header sum: completed below if the frame is
		 * redirected. The test is the packet thread's (packet/src/csum.rs);
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
	key.tun_src = tun_src;
	key.vni = vni;

	v = bpf_map_lookup_elem(&fc_flows, &key);
	if (!v || v->gen != gen) {
		if (!off && !frags && key.proto == IPPROTO_UDP)
			return fc_ct_new(ctx, &key, gen, partial, l4, end, frame_len,
					 bpf_ntohs(ip->tot_len) - 20);
		return -1;
	}
	if ((v->flags & XBR_FC_CT) && key.proto == IPPROTO_TCP &&
	    (tcp_flags & (TCP_SYN | TCP_FIN | TCP_RST | TCP_ACK)) != TCP_ACK)
		return -1;
	inner_len = frame_len - off;
	if (v->action == XBR_FC_DROP) {
		__sync_fetch_and_add(&v->packets, 1);
		__sync_fetch_and_add(&v->bytes, inner_len);
		return XDP_DROP;
	}
	/* Too big for the tunnel: xbr drops it and counts why. */
	if ((v->flags & XBR_FC_ENCAP) && inner_len > v->encap_max_inner)
		return -1;
	if (frags && !(v->flags & XBR_FC_FRAGS))
		return -1;
	/* Back into the tunnel it came from: never installed (xbr refuses
	 * output to the input port), and the head would move twice. */
	if (off && (v->flags & XBR_FC_ENCAP))
		return -1;
	/* Before counting: a frame left to xbr is counted there. Completing
	 * the checksum does not change what xbr would do with the frame. */
	if (partial) {
		__u16 l4_len = bpf_ntohs(ip->tot_len) - 20;
		__u32 csum_off = key.proto == IPPROTO_TCP ? 16 : 6;
		int udp = key.proto == IPPROTO_UDP;

		if (frags) {
			/* In the first buffer: checked with the TCP/UDP header. */
			__u16 *field = (__u16 *)(l4 + (csum_off & 31));

			if ((void *)(field + 1) > end ||
			    xbr_complete_csum_frags(ctx, off + ETH_HLEN + 20, l4_len, field, udp) < 0)
				return -1;
		} else if (xbr_complete_csum(l4, end, l4_len, csum_off, udp) < 0) {
			return -1;
		}
	}
	/* Decapsulation strips the outer headers, encapsulation makes room
	 * for them; if the head cannot move, the frame is unchanged and xbr
	 * does the work. */
	if (off) {
		if (bpf_xdp_adjust_head(ctx, off))
			return -1;
	} else if (v->flags & XBR_FC_ENCAP) {
		if (bpf_xdp_adjust_head(ctx, -XBR_VXLAN_OUTER))
			return -1;
	}
	data = (void *)(long)ctx->data;
	end = (void *)(long)ctx->data_end;
	eth = data;
	if (v->flags & XBR_FC_ENCAP) {
		/* The head moved by exactly this much: only for the verifier. */
		if (data + XBR_VXLAN_OUTER > end)
			return XDP_ABORTED;
		xbr_write_outer(data, v, inner_len);
		eth = data + XBR_VXLAN_OUTER;
	}
	if ((void *)(eth + 1) > end)
		return XDP_ABORTED;
	/* After the head moved: a frame left to xbr must be as it came. */
	if ((v->flags & XBR_FC_SET_NW) && xbr_set_nw((void *)(eth + 1), end, v) < 0)
		return XDP_ABORTED;
	if (v->flags & XBR_FC_SET_DST)
		__builtin_memcpy(eth->h_dest, v->eth_dst, 6);
	if (v->flags & XBR_FC_SET_SRC)
		__builtin_memcpy(eth->h_source, v->eth_src, 6);
	__sync_fetch_and_add(&v->packets, 1);
	__sync_fetch_and_add(&v->bytes, inner_len);
	return bpf_redirect_map(&fc_devs, v->out_ifindex, 0);
}

/* "xdp.frags": frames larger than a page reach the program (and xbr's
 * multi-buffer AF_XDP sockets) in several buffers; without it a veth or
 * NIC refuses native XDP above an MTU of about 3500. */
/*
 * Frames of a port's queue without a bound socket, dropped (fail closed):
 * one count for the bridge (the map is shared by its programs and pinned
 * with them, so it counts while no xbr runs), per CPU.
 */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} closed_drops SEC(".maps");

SEC("xdp.frags")
int xbr_xdp_rx(struct xdp_md *ctx)
{
	__u32 zero = 0;
	__u64 *gen = bpf_map_lookup_elem(&fc_gen, &zero);
	__u64 *drops;
	int act;

	if (gen && *gen) {
		act = fc_lookup(ctx, *gen, 0, 0, 0);
		if (act >= 0)
			return act;
	}
	act = bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_DROP);
	if (act == XDP_DROP) {
		drops = bpf_map_lookup_elem(&closed_drops, &zero);
		if (drops)
			*drops += 1;
	}
	return act;
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

/*
 * The checks xbr's decapsulation makes (src/vxlan/encap.rs, decap), for a
 * frame the uplink program selected: a correct IPv4 header checksum, an
 * IPv4 total length that is the frame's (no Ethernet padding: xbr cuts it,
 * here it would stay), a UDP length that agrees, no UDP checksum (one to
 * verify goes to xbr), VXLAN flags exactly I with the reserved bits zero,
 * and a whole inner Ethernet header. Returns the VNI (network order, in
 * the low 24 bits of the word's bytes 1-3) through *vni, and 0; -1 leaves
 * the frame to xbr, which drops and counts what is malformed.
 */
static __always_inline int xbr_vxlan_valid(void *data, void *end, __u32 frame_len, __be32 *vni)
{
	struct iphdr *ip = data + XBR_OUTER_IP_AT;
	struct udphdr *udp = data + XBR_OUTER_UDP_AT;
	__u8 *vx = data + XBR_OUTER_UDP_AT + 8;
	__s64 sum;

	if ((void *)(vx + 8 + ETH_HLEN) > end)
		return -1;
	if (bpf_ntohs(ip->tot_len) != frame_len - XBR_OUTER_IP_AT)
		return -1;
	if (bpf_ntohs(udp->len) != frame_len - XBR_OUTER_UDP_AT || udp->check != 0)
		return -1;
	if (vx[0] != 0x08 || vx[1] || vx[2] || vx[3] || vx[7])
		return -1;
	sum = bpf_csum_diff(NULL, 0, (__be32 *)ip, sizeof(*ip), 0);
	if (sum < 0 || fold16((__u32)sum) != 0xffff)
		return -1;
	/* The key holds the VNI as a 32-bit big-endian number. */
	((__u8 *)vni)[0] = 0;
	((__u8 *)vni)[1] = vx[4];
	((__u8 *)vni)[2] = vx[5];
	((__u8 *)vni)[3] = vx[6];
	return 0;
}

/* Redirected: untagged IPv4 without options, not a fragment (xbr does not
 * reassemble), UDP to local_ip:dst_port. Frames whose inner flow has a
 * cache entry are decapsulated and forwarded here (after the checks
 * xbr would make); xbr validates the rest (checksum, lengths, VXLAN
 * flags) and counts what it drops. */
/* "xdp.frags": as xbr_xdp_rx. */
SEC("xdp.frags")
int xbr_xdp_vxlan(struct xdp_md *ctx)
{
	void *data = (void *)(long)ctx->data;
	void *end = (void *)(long)ctx->data_end;
	struct ethhdr *eth = data;
	struct iphdr *ip;
	struct udphdr *udp;
	struct xbr_vxlan_cfg *cfg;
	__u32 zero = 0, frame_len;
	__u64 *gen;
	__be32 vni;

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
	gen = bpf_map_lookup_elem(&fc_gen, &zero);
	/* The whole frame's length: a jumbo one is in several buffers (see
	 * fc_lookup), and only then is the helper called. */
	frame_len = (__u32)(end - data);
	if (bpf_ntohs(ip->tot_len) > frame_len - XBR_OUTER_IP_AT)
		frame_len = bpf_xdp_get_buff_len(ctx);
	if (gen && *gen && xbr_vxlan_valid(data, end, frame_len, &vni) == 0) {
		int act = fc_lookup(ctx, *gen, XBR_VXLAN_OUTER, ip->saddr, vni);

		if (act >= 0)
			return act;
	}
	return bpf_redirect_map(&xsks, ctx->rx_queue_index, XDP_PASS);
}

/* bpf_redirect_map() is not GPL-only, but the flow cache will need helpers
 * that are (bpf_fib_lookup, conntrack kfuncs): declare a GPL-compatible
 * license now so the program's license does not change under users later. */
char LICENSE[] SEC("license") = "Dual BSD/GPL";
