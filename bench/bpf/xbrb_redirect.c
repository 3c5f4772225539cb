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

/*
 * The encapsulation reference: pushes 50 bytes of outer headers (Ethernet,
 * IPv4 without options, UDP to 4789, VXLAN) in front of the frame and
 * redirects like xbrb_redirect. The headers come whole from encap_hdr
 * (written by userspace for the one remote VTEP); per frame the program
 * fills in the IPv4 total length and checksum and the UDP length, which
 * depend on the frame's length. No lookup, no UDP source-port hash (a
 * fixed port), IPv4 id 0 with DF: the least work a correct VXLAN encap in
 * XDP can do.
 */
struct encap_hdr {
	__u8 b[VXLAN_OVERHEAD];
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct encap_hdr);
} encap_hdr SEC(".maps");

#define IP_OFF 14
#define UDP_OFF (IP_OFF + 20)

SEC("xdp")
int xbrb_encap_redirect(struct xdp_md *ctx)
{
	__u32 zero = 0;
	struct encap_hdr *h = bpf_map_lookup_elem(&encap_hdr, &zero);
	if (!h)
		return XDP_DROP;
	__u32 inner = (__u32)(ctx->data_end - ctx->data);
	if (bpf_xdp_adjust_head(ctx, -VXLAN_OVERHEAD))
		return XDP_DROP;
	__u8 *data = (void *)(long)ctx->data;
	void *data_end = (void *)(long)ctx->data_end;
	if ((void *)(data + VXLAN_OVERHEAD) > data_end)
		return XDP_DROP;
	__builtin_memcpy(data, h->b, VXLAN_OVERHEAD);
	__u16 ip_len = (__u16)(inner + VXLAN_OVERHEAD - IP_OFF);
	__u16 udp_len = ip_len - 20;
	data[IP_OFF + 2] = ip_len >> 8;
	data[IP_OFF + 3] = ip_len & 0xff;
	data[UDP_OFF + 4] = udp_len >> 8;
	data[UDP_OFF + 5] = udp_len & 0xff;
	/* The template's checksum field is 0: sum the header as it is. */
	__u32 sum = 0;
	for (int w = 0; w < 10; w++)
		sum += ((__u32)data[IP_OFF + 2 * w] << 8) | data[IP_OFF + 2 * w + 1];
	sum = (sum & 0xffff) + (sum >> 16);
	sum = (sum & 0xffff) + (sum >> 16);
	__u16 csum = ~sum & 0xffff;
	data[IP_OFF + 10] = csum >> 8;
	data[IP_OFF + 11] = csum & 0xff;
	return bpf_redirect_map(&redirect_port, 0, XDP_DROP);
}

char _license[] SEC("license") = "Dual BSD/GPL";
