// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xbr-bench's generator: run with BPF_PROG_RUN in "live frames" mode
 * (BPF_F_TEST_XDP_LIVE_FRAMES), once per frame, on a page initialised from
 * the template the loader passes as data_in. Each run turns the frame into
 * the next flow of the sequence, stamps the send time into the payload and
 * returns XDP_TX, which live mode turns into a transmission out of the
 * ingress device (the veth the loader names in the context).
 *
 * The kernel recycles pages without copying the template again, so a page
 * may hold the previous run's rewrites: every field is written absolutely
 * (from gen_cfg) and checksums are updated from the bytes actually in the
 * frame, never from what the template held.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define VARY_SRC_PORT 1
#define VARY_DST_IP 2
#define VARY_SRC_IP 4
#define VARY_DST_PORT 8

/* Offsets are bounded so the verifier can check the accesses. */
#define MAX_OFF 512

/* Written by the loader before any run; offsets are from the frame start. */
struct xbrb_gen_cfg {
	__u32 n_flows;     /* >= 1 */
	__u32 vary;        /* VARY_* bits */
	__u16 ip_off;      /* IPv4 header whose fields vary (inner for VXLAN) */
	__u16 l4_off;      /* its TCP/UDP header */
	__u16 l4_csum_off; /* 0: no L4 checksum to keep (UDP checksum 0) */
	__u16 ts_off;      /* 8-byte send timestamp in the payload */
	__be32 src_ip;     /* flow 0's addresses and ports */
	__be32 dst_ip;
	__u16 src_port;    /* host order */
	__u16 dst_port;    /* host order */
};

/* Per CPU: the flow sequence and how many frames were handed to XDP_TX. */
struct xbrb_gen_state {
	__u64 seq;
	__u64 sent;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbrb_gen_cfg);
} gen_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbrb_gen_state);
} gen_state SEC(".maps");

static __always_inline __u16 csum_fold(__s64 sum)
{
	__u64 s = (__u64)sum;
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	s = (s & 0xffff) + (s >> 16);
	return (__u16)~s;
}

/* The checksum `csum` (as stored) after `size` bytes changed from `from` to `to`. */
static __always_inline __u16 csum_update(__u16 csum, void *from, void *to, __u32 size)
{
	__s64 d = bpf_csum_diff(from, size, to, size, (__u16)~csum);
	return csum_fold(d);
}

SEC("xdp")
int xbrb_gen(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct xbrb_gen_cfg *cfg = bpf_map_lookup_elem(&gen_cfg, &zero);
	struct xbrb_gen_state *st = bpf_map_lookup_elem(&gen_state, &zero);
	if (!cfg || !st || cfg->n_flows == 0)
		return XDP_ABORTED;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;

	__u32 ip_off = cfg->ip_off, l4_off = cfg->l4_off;
	__u32 csum_off = cfg->l4_csum_off, ts_off = cfg->ts_off;
	if (ip_off > MAX_OFF || l4_off > MAX_OFF || csum_off > MAX_OFF || ts_off > MAX_OFF)
		return XDP_ABORTED;
	__u8 *ip = data + ip_off;
	__u8 *l4 = data + l4_off;
	__u8 *ts = data + ts_off;
	__u16 *l4_csum = data + csum_off;
	if ((void *)(ip + 20) > data_end || (void *)(l4 + 4) > data_end ||
	    (void *)(ts + 8) > data_end || (void *)(l4_csum + 1) > data_end)
		return XDP_ABORTED;
	__u16 *ip_csum = (__u16 *)(ip + 10);

	__u32 flow = st->seq % cfg->n_flows;
	st->seq++;

	/* Source IP, destination IP, then the port word (source and
	 * destination ports share 4 bytes), each followed by its checksum
	 * updates: the IP header's for addresses, the L4 one (pseudo-header)
	 * for all. */
	__be32 old, new;
	if (cfg->vary & VARY_SRC_IP) {
		__builtin_memcpy(&old, ip + 12, 4);
		new = bpf_htonl(bpf_ntohl(cfg->src_ip) + flow);
		__builtin_memcpy(ip + 12, &new, 4);
		*ip_csum = csum_update(*ip_csum, &old, &new, 4);
		if (csum_off)
			*l4_csum = csum_update(*l4_csum, &old, &new, 4);
	}
	if (cfg->vary & VARY_DST_IP) {
		__builtin_memcpy(&old, ip + 16, 4);
		new = bpf_htonl(bpf_ntohl(cfg->dst_ip) + flow);
		__builtin_memcpy(ip + 16, &new, 4);
		*ip_csum = csum_update(*ip_csum, &old, &new, 4);
		if (csum_off)
			*l4_csum = csum_update(*l4_csum, &old, &new, 4);
	}
	if (cfg->vary & VARY_SRC_PORT) {
		__builtin_memcpy(&old, l4, 4);
		new = old;
		__u16 port = bpf_htons((__u16)(cfg->src_port + flow));
		__builtin_memcpy(&new, &port, 2);
		__builtin_memcpy(l4, &new, 4);
		if (csum_off)
			*l4_csum = csum_update(*l4_csum, &old, &new, 4);
	}
	if (cfg->vary & VARY_DST_PORT) {
		__builtin_memcpy(&old, l4, 4);
		new = old;
		__u16 port = bpf_htons((__u16)(cfg->dst_port + flow));
		__builtin_memcpy((__u8 *)&new + 2, &port, 2);
		__builtin_memcpy(l4, &new, 4);
		if (csum_off)
			*l4_csum = csum_update(*l4_csum, &old, &new, 4);
	}

	__u64 old_ts, now = bpf_ktime_get_ns();
	__builtin_memcpy(&old_ts, ts, 8);
	__builtin_memcpy(ts, &now, 8);
	if (csum_off)
		*l4_csum = csum_update(*l4_csum, &old_ts, &now, 8);

	st->sent++;
	return XDP_TX;
}

char _license[] SEC("license") = "Dual BSD/GPL";
