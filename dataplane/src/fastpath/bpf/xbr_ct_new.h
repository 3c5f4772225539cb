// SPDX-License-Identifier: (GPL-2.0-only OR BSD-2-Clause)
#ifndef XBR_CT_NEW_H
#define XBR_CT_NEW_H

/*
 * New connections created by xbr's XDP program (included by xbr_xdp.c,
 * after the flow cache's definitions and the checksum helpers it uses;
 * the full design is in dataplane/src/conntrack/kernel_new.rs). xbr's
 * conntrack in userspace stays the authority: the kernel creates a
 * connection only where the packet thread would have created the same
 * one with the same outcome for the packet.
 *
 * ct_new maps an ingress ifindex and a slot (up to XBR_CT_SLOTS a device)
 * to a template: a translation that xbr's pipeline gave a UDP frame
 * without a connection:
 * `ct(table=N)` in zone Z (the frame is then +trk+new), then
 * `ct(commit)` in zone Z and one output, under the mask of every header
 * bit the two passes examined. A UDP frame that misses fc_flows and
 * matches a template under its mask (and whose tuple no connection holds
 * in either direction) would get that translation.
 *
 * ct_slots counts, per slot, the connections whose tuples hash there:
 * each tuple in its canonical direction (the lower address and port as
 * the source), so that a tuple and its reverse share a slot. xbr adds
 * and subtracts its own connections' (the array is mapped into its
 * memory) as its table changes; a connection created here claims an
 * empty slot. A frame whose slot is not empty may belong to a connection
 * (or share the slot with one): it is xbr's.
 *
 * ct_events reports each connection created here to xbr, which stores it
 * (xbr reads every report before it decides that a tuple has no
 * connection). ct_cfg[0].budget is how many more connections the kernel
 * may create before xbr's table would be full (xbr rewrites it as its
 * table fills and empties); at zero, frames go to xbr, which finds the
 * table full. A frame whose report finds the ring full (xbr a whole ring
 * behind) is dropped and counted in its template.
 *
 * ct_ports shares the ring between ingress ports, so that one pod opening
 * connections faster than xbr reads them cannot fill it for the others
 * (whose new connections would then be dropped): per bucket (ingress
 * ifindex modulo XBR_CT_PORT_BUCKETS), the reports not yet read (held,
 * added here before the report is submitted, taken back by xbr as it
 * reads it) and the frames refused for the share; last, how many buckets
 * hold reports (each bucket's 0->1 and 1->0 transitions, made here and by
 * xbr with fetching atomics, count it up and down exactly once). A port
 * may report while it holds fewer than
 * max(XBR_CT_PORT_FLOOR, ring_reports / (other holding buckets + 2)):
 * alone, half the ring. A frame over its share goes to xbr, whose packet
 * thread takes a bounded batch of each port per round.
 */
#define XBR_CT_PORT_BUCKETS 1024
#define XBR_CT_PORT_REFUSED XBR_CT_PORT_BUCKETS
#define XBR_CT_PORT_ACTIVE (2 * XBR_CT_PORT_BUCKETS)
#define XBR_CT_PORT_FLOOR 64
#define XBR_CT_SLOTS 4
#define XBR_CT_KEY_WORDS 10

struct xbr_ct_tmpl {
	__u64 gen;
	__u64 packets;
	__u64 bytes;
	/* struct xbr_fc_key's bytes: which bits the translation examined,
	 * and their values (masked). */
	__u32 mask[XBR_CT_KEY_WORDS];
	__u32 match[XBR_CT_KEY_WORDS];
	__u32 out_ifindex;
	__u16 zone;
	/* XBR_FC_SET_DST, XBR_FC_SET_SRC. */
	__u8 flags;
	__u8 pad;
	__u8 eth_dst[6];
	__u8 eth_src[6];
	/* Frames dropped because the ring of reports was full. */
	__u32 overflow;
};

struct xbr_ct_slot {
	__u32 ifindex;
	__u32 slot;
};

/* A connection's tuple, in its canonical direction. */
struct xbr_ct_key {
	__u16 zone;
	__u8 proto;
	__u8 pad;
	__be32 src;
	__be32 dst;
	__be16 sport;
	__be16 dport;
};

struct xbr_ct_event {
	struct xbr_ct_key orig;
	__u32 ifindex;
	__u32 slot;
};

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1);
	__type(key, struct xbr_ct_slot);
	__type(value, struct xbr_ct_tmpl);
} ct_new SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} ct_slots SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} ct_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 2 * XBR_CT_PORT_BUCKETS + 1);
	__uint(map_flags, BPF_F_MMAPABLE);
	__type(key, __u32);
	__type(value, __u64);
} ct_ports SEC(".maps");

/* Written by xbr: the budget every round, the rest once. */
struct xbr_ct_cfg {
	__s64 budget;
	/* The slot of a tuple: xbr_ct_slot() with this seed, masked. */
	__u64 seed;
	__u64 mask;
	/* Reports ct_events holds. */
	__u64 ring_reports;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct xbr_ct_cfg);
} ct_cfg SEC(".maps");

/* splitmix64's finalizer: every input bit reaches every output bit. */
static __always_inline __u64 xbr_mix64(__u64 x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ULL;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebULL;
	x ^= x >> 31;
	return x;
}

/* A canonical tuple's slot before the mask; src/conntrack/kernel_new.rs
 * computes the same. */
static __always_inline __u64 xbr_ct_slot(const struct xbr_ct_key *k, __u64 seed)
{
	__u64 h;

	h = xbr_mix64(seed ^ ((__u64)bpf_ntohl(k->src) << 32 | bpf_ntohl(k->dst)));
	h ^= (__u64)bpf_ntohs(k->sport) << 48 | (__u64)bpf_ntohs(k->dport) << 32 |
	     (__u32)k->zone << 8 | k->proto;
	return xbr_mix64(h);
}

/*
 * A UDP frame (not decapsulated, in one buffer) that missed fc_flows: if a
 * template of its ingress device matches it and its tuple has no
 * connection, creates the connection (see ct_new above), reports it and
 * forwards the frame as the template says. Returns the XDP action, or -1
 * for "ask xbr" (nothing created).
 */
static __always_inline int fc_ct_new(struct xdp_md *ctx, struct xbr_fc_key *key, __u64 gen,
				     int partial, __u8 *l4, void *end, __u32 frame_len, __u16 l4_len)
{
	struct xbr_ct_slot at = { .ifindex = key->ifindex };
	struct xbr_ct_tmpl *t = NULL;
	struct xbr_ct_key orig, canon;
	struct xbr_ct_event *ev;
	struct ethhdr *eth;
	__u32 *words = (__u32 *)key, zero = 0, slot = 0, idx;
	struct xbr_ct_cfg *cfg;
	__u64 *count, *held, *refused, *active;
	__u32 bucket, at_refused, at_active = XBR_CT_PORT_ACTIVE;
	__s64 others;
	__u64 share;
	int i, j;

	for (i = 0; i < XBR_CT_SLOTS; i++) {
		struct xbr_ct_tmpl *c;
		int same;

		at.slot = i;
		c = bpf_map_lookup_elem(&ct_new, &at);
		if (!c)
			continue;
		same = c->gen == gen;

		for (j = 0; j < XBR_CT_KEY_WORDS && same; j++)
			same = (words[j] & c->mask[j]) == c->match[j];
		if (same) {
			t = c;
			slot = i;
			break;
		}
	}
	if (!t)
		return -1;
	cfg = bpf_map_lookup_elem(&ct_cfg, &zero);
	if (!cfg || cfg->budget <= 0)
		return -1;
	/* Before anything is stored: once the connection exists, the frame
	 * must leave as the template says (xbr would now find it +est). */
	if (partial && xbr_complete_csum(l4, end, l4_len, 6, 1) < 0)
		return -1;
	__builtin_memset(&orig, 0, sizeof(orig));
	orig.zone = t->zone;
	orig.proto = key->proto;
	orig.src = key->ip_src;
	orig.dst = key->ip_dst;
	orig.sport = key->tp_src;
	orig.dport = key->tp_dst;
	canon = orig;
	if (bpf_ntohl(orig.src) > bpf_ntohl(orig.dst) ||
	    (orig.src == orig.dst && bpf_ntohs(orig.sport) > bpf_ntohs(orig.dport))) {
		canon.src = orig.dst;
		canon.dst = orig.src;
		canon.sport = orig.dport;
		canon.dport = orig.sport;
	}
	/* A tuple that is its own reverse (the same address and port at both
	 * ends) cannot be a connection: xbr's. */
	if (orig.src == orig.dst && orig.sport == orig.dport)
		return -1;
	idx = (__u32)(xbr_ct_slot(&canon, cfg->seed) & cfg->mask);
	count = bpf_map_lookup_elem(&ct_slots, &idx);
	if (!count)
		return -1;
	/* The port's share of the ring (see ct_ports above). */
	bucket = key->ifindex & (XBR_CT_PORT_BUCKETS - 1);
	at_refused = XBR_CT_PORT_REFUSED + bucket;
	held = bpf_map_lookup_elem(&ct_ports, &bucket);
	refused = bpf_map_lookup_elem(&ct_ports, &at_refused);
	active = bpf_map_lookup_elem(&ct_ports, &at_active);
	if (!held || !refused || !active)
		return -1;
	others = (__s64)*active - (*held > 0);
	if (others < 0)
		others = 0;
	share = cfg->ring_reports / ((__u64)others + 2);
	if (share < XBR_CT_PORT_FLOOR)
		share = XBR_CT_PORT_FLOOR;
	if (*held >= share) {
		__sync_fetch_and_add(refused, 1);
		return -1;
	}
	/* The ring full: xbr is a whole ring of connections behind. Handing
	 * it the frame would only add the slow path's work to what it cannot
	 * keep up with; dropped, as a full AF_XDP ring would, and counted. */
	ev = bpf_ringbuf_reserve(&ct_events, sizeof(*ev), 0);
	if (!ev) {
		__sync_fetch_and_add(&t->overflow, 1);
		return XDP_DROP;
	}
	/* The slot taken (a connection of the tuple in either direction, or
	 * one that shares the slot): xbr's. */
	if (__sync_val_compare_and_swap(count, 0, 1) != 0) {
		bpf_ringbuf_discard(ev, 0);
		return -1;
	}
	/* Not a fetch-and-add: CPUs racing past the test above overdraw the
	 * budget by at most one each, which xbr's margin covers. */
	__sync_fetch_and_add(&cfg->budget, -1);
	ev->orig = orig;
	ev->ifindex = key->ifindex;
	ev->slot = slot;
	/* Held before it is submitted: xbr takes it back once it read it. */
	if (__sync_fetch_and_add(held, 1) == 0)
		__sync_fetch_and_add(active, 1);
	/* No wakeup: xbr reads the ring every round, and a wakeup is an
	 * interrupt to this CPU whenever xbr had caught up. */
	bpf_ringbuf_submit(ev, BPF_RB_NO_WAKEUP);
	__sync_fetch_and_add(&t->packets, 1);
	__sync_fetch_and_add(&t->bytes, frame_len);
	eth = (void *)(long)ctx->data;
	if ((void *)(eth + 1) > (void *)(long)ctx->data_end)
		return XDP_ABORTED;
	if (t->flags & XBR_FC_SET_DST)
		__builtin_memcpy(eth->h_dest, t->eth_dst, 6);
	if (t->flags & XBR_FC_SET_SRC)
		__builtin_memcpy(eth->h_source, t->eth_src, 6);
	return bpf_redirect_map(&fc_devs, t->out_ifindex, 0);
}

#endif
