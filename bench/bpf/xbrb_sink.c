// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
/*
 * xbr-bench's sink, attached to the receiving pod's veth: counts every
 * frame and its bytes per CPU, and for frames that carry the generator's
 * tag at the configured offset, the one-way latency from the send
 * timestamp (both sides read bpf_ktime_get_ns(), the same clock on every
 * CPU), in a log-linear histogram. Then drops the frame.
 *
 * Optionally (n_dst > 0) each tagged frame is also put in a class by its
 * IPv4 destination: destination i = dst_base + i for i < n_dst, class
 * i & 1 (0: the `churn` scenario's fixed destinations, 1: the moving
 * ones), class 2 for any other address. Per class the sink counts every
 * frame, and the frames it can judge against one flow table: those sent
 * at or after window[0] and received before window[1] (CLOCK_MONOTONIC
 * ns, written by userspace around each flow change), which the switch
 * must have forwarded between those two instants.
 *
 * Optionally (n_checks > 0, or csum_off set) a tagged frame must also
 * be well formed to count as received: each check compares 4 bytes at an
 * offset, under a mask, with the expected value (the `encap` scenario
 * checks the outer headers a switch wrote: addresses, UDP port 4789,
 * lengths, VXLAN flags and VNI, and the inner frame's headers), and
 * csum_off names an IPv4 header (no options) whose checksum must verify.
 * A tagged frame that fails is counted as rejected, not as tagged, so a
 * switch that encapsulates wrongly delivers nothing.
 *
 * Histogram bucket of a latency v ns: v itself below 8; above, 4 buckets
 * per power of two (the highest set bit and the two bits below it), so a
 * bucket spans at most 25% of its value. 128 buckets reach 2^33 ns (8 s);
 * anything longer lands in the last one.
 */
#include <linux/bpf.h>
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>

#define HIST_BUCKETS 128
#define MAX_OFF 512
#define MAX_CHECKS 24
#define NO_CSUM 0xffff

struct xbrb_sink_check {
	__u16 off;
	__u16 pad;
	__u32 mask;  /* bytes as in the frame */
	__u32 value; /* bytes as in the frame, already masked */
};

struct xbrb_sink_cfg {
	__u32 magic;  /* 0: count only */
	__u16 tag_off; /* the tag: magic (4 bytes), 4 bytes pad, timestamp (8) */
	__u16 ip_off;  /* the IPv4 header whose destination is classified */
	__u32 dst_base; /* destination 0, network byte order */
	__u32 n_dst;    /* 0: no classes */
	__u16 csum_off; /* an IPv4 header whose checksum must verify; NO_CSUM: none */
	__u16 n_checks; /* entries of checks[] in use */
	struct xbrb_sink_check checks[MAX_CHECKS];
};

#define N_CLASSES 3

struct xbrb_sink_class {
	__u64 total;
	__u64 judged;
};

struct xbrb_sink_stats {
	__u64 packets;
	__u64 bytes;
	__u64 tagged; /* frames with the generator's tag (latency measured) */
	__u64 rejected; /* tagged frames that failed a check (not in tagged) */
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbrb_sink_cfg);
} sink_cfg SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbrb_sink_stats);
} sink_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, HIST_BUCKETS);
	__type(key, __u32);
	__type(value, __u64);
} sink_hist SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, N_CLASSES);
	__type(key, __u32);
	__type(value, struct xbrb_sink_class);
} sink_class SEC(".maps");

/* [0]: first send time judged, [1]: receive time from which nothing is.
 * Two entries, not one struct: userspace updates one 8-byte value at a
 * time, so the program never sees a half-written pair. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2);
	__type(key, __u32);
	__type(value, __u64);
} sink_window SEC(".maps");

static __always_inline void classify(struct xdp_md *ctx, struct xbrb_sink_cfg *cfg,
				     __u64 sent, __u64 now)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 off = cfg->ip_off;
	if (cfg->n_dst == 0 || off > MAX_OFF)
		return;
	__u8 *ip = data + off;
	if ((void *)(ip + 20) > data_end)
		return;
	__u32 dst;
	__builtin_memcpy(&dst, ip + 16, 4);
	__u32 idx = bpf_ntohl(dst) - bpf_ntohl(cfg->dst_base);
	__u32 class = idx < cfg->n_dst ? (idx & 1) : 2;
	struct xbrb_sink_class *c = bpf_map_lookup_elem(&sink_class, &class);
	if (!c)
		return;
	c->total++;
	__u32 k0 = 0, k1 = 1;
	__u64 *start = bpf_map_lookup_elem(&sink_window, &k0);
	__u64 *end = bpf_map_lookup_elem(&sink_window, &k1);
	if (start && end && sent >= *start && now < *end)
		c->judged++;
}

/* Whether the frame passes every configured check. */
static __always_inline int well_formed(struct xdp_md *ctx, struct xbrb_sink_cfg *cfg)
{
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	__u32 n = cfg->n_checks;
	for (__u32 i = 0; i < MAX_CHECKS; i++) {
		if (i >= n)
			break;
		struct xbrb_sink_check *c = &cfg->checks[i];
		__u32 off = c->off;
		if (off > MAX_OFF)
			return 0;
		__u8 *p = data + off;
		if ((void *)(p + 4) > data_end)
			return 0;
		__u32 v;
		__builtin_memcpy(&v, p, 4);
		if ((v & c->mask) != c->value)
			return 0;
	}
	__u32 off = cfg->csum_off;
	if (off == NO_CSUM)
		return 1;
	if (off > MAX_OFF)
		return 0;
	__u8 *ip = data + off;
	if ((void *)(ip + 20) > data_end)
		return 0;
	__u32 sum = 0;
	for (int w = 0; w < 10; w++)
		sum += ((__u32)ip[2 * w] << 8) | ip[2 * w + 1];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	return sum == 0xffff;
}

static __always_inline __u32 ilog2(__u64 v)
{
	__u32 r = 0;
	if (v >> 32) { v >>= 32; r += 32; }
	if (v >> 16) { v >>= 16; r += 16; }
	if (v >> 8) { v >>= 8; r += 8; }
	if (v >> 4) { v >>= 4; r += 4; }
	if (v >> 2) { v >>= 2; r += 2; }
	if (v >> 1) { r += 1; }
	return r;
}

static __always_inline __u32 bucket(__u64 v)
{
	if (v < 8)
		return (__u32)v;
	__u32 l = ilog2(v);
	__u32 b = l * 4 + (__u32)((v >> (l - 2)) & 3) - 4;
	return b < HIST_BUCKETS ? b : HIST_BUCKETS - 1;
}

SEC("xdp")
int xbrb_sink(struct xdp_md *ctx)
{
	__u32 zero = 0;
	void *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	struct xbrb_sink_stats *st = bpf_map_lookup_elem(&sink_stats, &zero);
	struct xbrb_sink_cfg *cfg = bpf_map_lookup_elem(&sink_cfg, &zero);
	if (!st || !cfg)
		return XDP_DROP;
	st->packets++;
	st->bytes += (__u64)(data_end - data);

	__u32 off = cfg->tag_off;
	if (cfg->magic == 0 || off > MAX_OFF)
		return XDP_DROP;
	__u8 *tag = data + off;
	if ((void *)(tag + 16) > data_end)
		return XDP_DROP;
	__u32 magic;
	__u64 sent;
	__builtin_memcpy(&magic, tag, 4);
	if (magic != cfg->magic)
		return XDP_DROP;
	__builtin_memcpy(&sent, tag + 8, 8);
	__u64 now = bpf_ktime_get_ns();
	/* A timestamp from the future is a corrupted tag: count, no latency. */
	if (sent > now)
		return XDP_DROP;
	if (!well_formed(ctx, cfg)) {
		st->rejected++;
		return XDP_DROP;
	}
	st->tagged++;
	classify(ctx, cfg, sent, now);
	__u32 b = bucket(now - sent);
	__u64 *slot = bpf_map_lookup_elem(&sink_hist, &b);
	if (slot)
		(*slot)++;
	return XDP_DROP;
}

char _license[] SEC("license") = "Dual BSD/GPL";
