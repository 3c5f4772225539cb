//! Loader of the benchmark's XDP programs (bpf/): the live-frames
//! generator, the counting sink, and the kernel-redirect reference.
//!
//! Each value owns its loaded object and, when attached, the bpf_link
//! (dropped first, so the program is detached before its maps go): a
//! killed xbr-bench leaves no program behind. Attaching resolves the
//! ifindex in the calling thread's network namespace, so callers attach
//! from a thread that entered the namespace (see [`crate::topo`]).

use libbpf_rs::{Link, MapCore, MapFlags, Object, ObjectBuilder, ProgramInput};
use std::ffi::OsStr;

use crate::packet::{Template, Vary};

mod checks;
pub use checks::{SinkChecks, MAX_SINK_CHECKS};

static GEN_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xbrb_gen.bpf.o"));
static SINK_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xbrb_sink.bpf.o"));
static REDIRECT_OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/xbrb_redirect.bpf.o"));

/// `BPF_F_TEST_XDP_LIVE_FRAMES` (include/uapi/linux/bpf.h, Linux 5.18+).
pub const BPF_F_TEST_XDP_LIVE_FRAMES: u32 = 1 << 1;
/// Buckets of the sink's latency histogram (bpf/xbrb_sink.c).
pub const HIST_BUCKETS: usize = 128;
/// XDP_TX, what the generator returns for a frame it sent.
pub const XDP_TX: u32 = 3;

/// `xbrb_gen_cfg.vary` bits (VARY_* in bpf/xbrb_gen.c).
fn vary_bits(v: Vary) -> u32 {
    u32::from(v.src_port)
        | u32::from(v.dst_ip) << 1
        | u32::from(v.src_ip) << 2
        | u32::from(v.dst_port) << 3
}

/// Errors of the loader; each names the program or map involved.
#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    #[error("loading {what}: {source}")]
    Load {
        what: &'static str,
        source: libbpf_rs::Error,
    },
    #[error("{what}: no {item} in the object")]
    Missing {
        what: &'static str,
        item: &'static str,
    },
    #[error("{what}: {op}: {source}")]
    Op {
        what: &'static str,
        op: String,
        source: libbpf_rs::Error,
    },
    #[error("{what}: map {map} returned {len} bytes per entry, expected {expected}")]
    Layout {
        what: &'static str,
        map: &'static str,
        len: usize,
        expected: usize,
    },
}

fn load(what: &'static str, bytes: &[u8]) -> Result<Object, BpfError> {
    ObjectBuilder::default()
        .open_memory(bytes)
        .and_then(|o| o.load())
        .map_err(|source| BpfError::Load { what, source })
}

fn map<'o>(
    obj: &'o Object,
    what: &'static str,
    name: &'static str,
) -> Result<libbpf_rs::Map<'o>, BpfError> {
    obj.maps()
        .find(|m| m.name() == OsStr::new(name))
        .ok_or(BpfError::Missing { what, item: name })
}

fn prog<'o>(
    obj: &'o Object,
    what: &'static str,
    name: &'static str,
) -> Result<libbpf_rs::ProgramMut<'o>, BpfError> {
    // The Mut flavour: test_run and attach_xdp live there.
    obj.progs_mut()
        .find(|p| p.name() == OsStr::new(name))
        .ok_or(BpfError::Missing { what, item: name })
}

fn op_err(what: &'static str, op: impl Into<String>) -> impl FnOnce(libbpf_rs::Error) -> BpfError {
    let op = op.into();
    move |source| BpfError::Op { what, op, source }
}

/// Sums the per-CPU values of entry `key` of `name`, read as `N` u64s.
fn percpu_sum<const N: usize>(
    obj: &Object,
    what: &'static str,
    name: &'static str,
    key: u32,
) -> Result<[u64; N], BpfError> {
    let m = map(obj, what, name)?;
    let per_cpu = m
        .lookup_percpu(&key.to_ne_bytes(), MapFlags::ANY)
        .map_err(op_err(what, format!("reading {name}")))?
        .unwrap_or_default();
    let mut out = [0u64; N];
    for v in per_cpu {
        if v.len() < N * 8 {
            return Err(BpfError::Layout {
                what,
                map: name,
                len: v.len(),
                expected: N * 8,
            });
        }
        for (i, o) in out.iter_mut().enumerate() {
            let mut b = [0u8; 8];
            b.copy_from_slice(&v[i * 8..i * 8 + 8]);
            *o += u64::from_ne_bytes(b);
        }
    }
    Ok(out)
}

/// The generator program, configured for one template; see bpf/xbrb_gen.c.
pub struct Generator {
    obj: Object,
    frame: Vec<u8>,
    /// The program attached to an idle interface, so that it stays in the
    /// kernel's XDP dispatcher between live-frames calls (see
    /// [`Generator::pin`]). Dropped (detached) before `obj`.
    pin: Option<Link>,
}

const GEN: &str = "generator";

impl Generator {
    /// Loads the program and writes its configuration: flow 0 is the
    /// template as built; flow i adds i to the varied fields.
    pub fn load(t: &Template, n_flows: u32, vary: Vary) -> Result<Generator, BpfError> {
        let obj = load(GEN, GEN_OBJECT)?;
        let f = &t.frame;
        let ip = usize::from(t.ip_off);
        let l4 = usize::from(t.l4_off);
        // struct xbrb_gen_cfg, C layout (28 bytes).
        let mut cfg = Vec::with_capacity(28);
        cfg.extend_from_slice(&n_flows.max(1).to_ne_bytes());
        cfg.extend_from_slice(&vary_bits(vary).to_ne_bytes());
        for off in [t.ip_off, t.l4_off, t.l4_csum_off, t.tag_off + 8] {
            cfg.extend_from_slice(&off.to_ne_bytes());
        }
        cfg.extend_from_slice(&f[ip + 12..ip + 16]); // already big-endian
        cfg.extend_from_slice(&f[ip + 16..ip + 20]);
        cfg.extend_from_slice(&u16::from_be_bytes([f[l4], f[l4 + 1]]).to_ne_bytes());
        cfg.extend_from_slice(&u16::from_be_bytes([f[l4 + 2], f[l4 + 3]]).to_ne_bytes());
        map(&obj, GEN, "gen_cfg")?
            .update(&0u32.to_ne_bytes(), &cfg, MapFlags::ANY)
            .map_err(op_err(GEN, "writing gen_cfg"))?;
        Ok(Generator {
            obj,
            frame: t.frame.clone(),
            pin: None,
        })
    }

    /// Attaches the program to `ifindex` (in the calling thread's
    /// namespace), an interface that must never receive a frame (it would
    /// be rewritten and sent back). Why: BPF_PROG_RUN in live-frames mode
    /// adds the program to the kernel's XDP dispatcher for the call and
    /// removes it after, and each change waits for an RCU grace period
    /// with the caller asleep (8-16 ms measured here, twice a call); a
    /// program the dispatcher already holds for an attachment is neither
    /// added nor removed, so short calls (a paced run's every millisecond)
    /// cost no sleep.
    pub fn pin(&mut self, ifindex: u32) -> Result<(), BpfError> {
        self.pin = Some(attach(&self.obj, GEN, "xbrb_gen", ifindex)?);
        Ok(())
    }

    fn ctx(&self, ifindex: u32) -> [u8; 24] {
        // struct xdp_md: data, data_end, data_meta, ingress_ifindex,
        // rx_queue_index, egress_ifindex.
        let mut ctx = [0u8; 24];
        let len = u32::try_from(self.frame.len()).unwrap_or(u32::MAX);
        ctx[4..8].copy_from_slice(&len.to_ne_bytes());
        ctx[12..16].copy_from_slice(&ifindex.to_ne_bytes());
        ctx
    }

    /// Sends `repeat` frames out of `ifindex` (in the calling thread's
    /// namespace) in live-frames mode, on the calling CPU. A signal may cut
    /// the run short: [`Generator::sent`] tells what was sent.
    pub fn run_live(&self, ifindex: u32, repeat: u32) -> Result<(), BpfError> {
        let p = prog(&self.obj, GEN, "xbrb_gen")?;
        let mut ctx = self.ctx(ifindex);
        let input = ProgramInput {
            context_in: Some(&mut ctx),
            data_in: Some(&self.frame),
            flags: BPF_F_TEST_XDP_LIVE_FRAMES,
            repeat,
            ..Default::default()
        };
        p.test_run(input)
            .map(|_| ())
            .map_err(op_err(GEN, "BPF_PROG_RUN in live-frames mode"))
    }

    /// Runs the program once on a copy of the frame in plain test mode
    /// (nothing is sent): the verdict and the rewritten frame. For tests,
    /// and to check the generator before a run.
    pub fn run_once(&self) -> Result<(u32, Vec<u8>), BpfError> {
        let p = prog(&self.obj, GEN, "xbrb_gen")?;
        let mut out = vec![0u8; self.frame.len()];
        let input = ProgramInput {
            data_in: Some(&self.frame),
            data_out: Some(&mut out),
            repeat: 1,
            ..Default::default()
        };
        let ret = p
            .test_run(input)
            .map_err(op_err(GEN, "BPF_PROG_RUN"))?
            .return_value;
        Ok((ret, out))
    }

    /// Frames the program has sent (returned XDP_TX for) so far, all CPUs.
    pub fn sent(&self) -> Result<u64, BpfError> {
        let [_seq, sent] = percpu_sum::<2>(&self.obj, GEN, "gen_state", 0)?;
        Ok(sent)
    }

    /// The template, as the program starts from it.
    pub fn frame(&self) -> &[u8] {
        &self.frame
    }
}

/// Sink counters, summed over CPUs; see bpf/xbrb_sink.c.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SinkCounters {
    pub packets: u64,
    pub bytes: u64,
    /// Frames that carried the generator's tag (their latency is in `hist`)
    /// and passed the sink's checks, if it has any.
    pub tagged: u64,
    /// Frames that carried the tag but failed a check (not in `tagged`).
    pub rejected: u64,
    pub hist: Vec<u64>,
}

impl SinkCounters {
    /// Adds another sink's counters to these.
    pub fn add(&mut self, other: &SinkCounters) {
        self.packets += other.packets;
        self.bytes += other.bytes;
        self.tagged += other.tagged;
        self.rejected += other.rejected;
        if self.hist.len() < other.hist.len() {
            self.hist.resize(other.hist.len(), 0);
        }
        for (a, b) in self.hist.iter_mut().zip(&other.hist) {
            *a += b;
        }
    }

    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &SinkCounters) -> SinkCounters {
        SinkCounters {
            packets: self.packets.saturating_sub(earlier.packets),
            bytes: self.bytes.saturating_sub(earlier.bytes),
            tagged: self.tagged.saturating_sub(earlier.tagged),
            rejected: self.rejected.saturating_sub(earlier.rejected),
            hist: self
                .hist
                .iter()
                .zip(earlier.hist.iter().chain(std::iter::repeat(&0)))
                .map(|(a, b)| a.saturating_sub(*b))
                .collect(),
        }
    }

    /// The latency below which fraction `q` of tagged frames fell, in ns:
    /// the middle of the histogram bucket holding that rank. `None` with no
    /// tagged frame.
    pub fn latency_quantile_ns(&self, q: f64) -> Option<f64> {
        let total: u64 = self.hist.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((q.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (b, n) in self.hist.iter().enumerate() {
            seen += n;
            if seen >= rank {
                let (lo, hi) = bucket_bounds(b);
                return Some((lo + hi) as f64 / 2.0);
            }
        }
        None
    }
}

/// The latencies [lo, hi) in ns that sink histogram bucket `b` counts (the
/// inverse of `bucket()` in bpf/xbrb_sink.c).
pub fn bucket_bounds(b: usize) -> (u64, u64) {
    if b < 8 {
        return (b as u64, b as u64 + 1);
    }
    let b = b as u64 + 4;
    let l = b / 4;
    let sub = b % 4;
    let lo = (1u64 << l) + (sub << (l - 2));
    (lo, lo + (1 << (l - 2)))
}

/// How the sink classifies frames by IPv4 destination (see
/// bpf/xbrb_sink.c): destination i = `base` + i for i < `n`, class i & 1
/// ([`CLASS_FIXED`], [`CLASS_MOVING`]), any other address [`CLASS_OTHER`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SinkClasses {
    /// Offset of the IPv4 header in the frames the sink receives.
    pub ip_off: u16,
    pub base: std::net::Ipv4Addr,
    pub n: u32,
}

pub const CLASS_FIXED: usize = 0;
pub const CLASS_MOVING: usize = 1;
pub const CLASS_OTHER: usize = 2;
pub const N_CLASSES: usize = 3;

/// Per class: tagged frames, and of them the ones inside the judging
/// window (sent after its start, received before its end).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ClassCounts {
    pub total: [u64; N_CLASSES],
    pub judged: [u64; N_CLASSES],
}

impl ClassCounts {
    /// What was counted between `earlier` and `self`.
    pub fn since(&self, earlier: &ClassCounts) -> ClassCounts {
        let sub = |a: [u64; N_CLASSES], b: [u64; N_CLASSES]| {
            std::array::from_fn(|i| a[i].saturating_sub(b[i]))
        };
        ClassCounts {
            total: sub(self.total, earlier.total),
            judged: sub(self.judged, earlier.judged),
        }
    }
}

/// The sink program attached to one interface.
pub struct Sink {
    // Drop order: the link first (detaches), then the object.
    _link: Link,
    obj: Object,
}

const SINK: &str = "sink";

impl Sink {
    /// Loads the sink and attaches it to `ifindex` (in the calling thread's
    /// namespace). Frames with [`crate::packet::TAG_MAGIC`] at `tag_off`
    /// get their latency measured.
    /// Frames that fail `checks` are counted as rejected instead.
    pub fn attach(
        ifindex: u32,
        tag_off: u16,
        classes: Option<SinkClasses>,
        checks: Option<&SinkChecks>,
    ) -> Result<Sink, BpfError> {
        let obj = load(SINK, SINK_OBJECT)?;
        // struct xbrb_sink_cfg, C layout (16 bytes, then the checks).
        let mut cfg = Vec::with_capacity(20 + MAX_SINK_CHECKS * 12);
        cfg.extend_from_slice(&crate::packet::TAG_MAGIC.to_ne_bytes());
        cfg.extend_from_slice(&tag_off.to_ne_bytes());
        let c = classes.unwrap_or(SinkClasses {
            ip_off: 0,
            base: std::net::Ipv4Addr::UNSPECIFIED,
            n: 0,
        });
        cfg.extend_from_slice(&c.ip_off.to_ne_bytes());
        cfg.extend_from_slice(&c.base.octets()); // network order, as the field
        cfg.extend_from_slice(&c.n.to_ne_bytes());
        cfg.extend_from_slice(&checks.cloned().unwrap_or_default().cfg_bytes());
        map(&obj, SINK, "sink_cfg")?
            .update(&0u32.to_ne_bytes(), &cfg, MapFlags::ANY)
            .map_err(op_err(SINK, "writing sink_cfg"))?;
        let link = attach(&obj, SINK, "xbrb_sink", ifindex)?;
        Ok(Sink { _link: link, obj })
    }

    /// The counters so far.
    pub fn counters(&self) -> Result<SinkCounters, BpfError> {
        let [packets, bytes, tagged, rejected] = percpu_sum::<4>(&self.obj, SINK, "sink_stats", 0)?;
        let mut hist = Vec::with_capacity(HIST_BUCKETS);
        for b in 0..HIST_BUCKETS as u32 {
            let [n] = percpu_sum::<1>(&self.obj, SINK, "sink_hist", b)?;
            hist.push(n);
        }
        Ok(SinkCounters {
            packets,
            bytes,
            tagged,
            rejected,
            hist,
        })
    }

    /// The per-class counters so far (all zero without classes).
    pub fn class_counts(&self) -> Result<ClassCounts, BpfError> {
        let mut c = ClassCounts::default();
        for class in 0..N_CLASSES {
            let [total, judged] = percpu_sum::<2>(&self.obj, SINK, "sink_class", class as u32)?;
            c.total[class] = total;
            c.judged[class] = judged;
        }
        Ok(c)
    }

    /// Sets the judging window: frames sent at or after `start` and
    /// received before `end` (CLOCK_MONOTONIC ns) count as judged. The
    /// end is written last when opening a window and alone when closing
    /// one, so the program sees either the old or the new bound, never a
    /// window that is wider than both.
    pub fn set_window(&self, start: u64, end: u64) -> Result<(), BpfError> {
        let m = map(&self.obj, SINK, "sink_window")?;
        for (k, v) in [(0u32, start), (1u32, end)] {
            m.update(&k.to_ne_bytes(), &v.to_ne_bytes(), MapFlags::ANY)
                .map_err(op_err(SINK, "writing sink_window"))?;
        }
        Ok(())
    }
}

fn attach(
    obj: &Object,
    what: &'static str,
    name: &'static str,
    ifindex: u32,
) -> Result<Link, BpfError> {
    let p = prog(obj, what, name)?;
    let idx = i32::try_from(ifindex).unwrap_or(i32::MAX);
    p.attach_xdp(idx)
        .map_err(op_err(what, format!("attaching XDP to ifindex {ifindex}")))
}

/// The kernel XDP redirect reference: every frame received on one
/// interface is redirected to another through a devmap.
pub struct Redirect {
    _link: Link,
    _obj: Object,
}

const REDIRECT: &str = "redirect";

impl Redirect {
    /// Attaches to `from` and redirects to `to` (both ifindexes in the
    /// calling thread's namespace).
    pub fn attach(from: u32, to: u32) -> Result<Redirect, BpfError> {
        Self::attach_prog("xbrb_redirect", from, to)
    }

    /// Like [`Redirect::attach`], removing the 50 bytes of outer VXLAN
    /// headers first.
    pub fn attach_decap(from: u32, to: u32) -> Result<Redirect, BpfError> {
        Self::attach_prog("xbrb_decap_redirect", from, to)
    }

    /// Like [`Redirect::attach`], pushing `outer` (the 50 bytes of outer
    /// headers, IPv4 checksum 0; lengths are filled in per frame) first.
    pub fn attach_encap(
        from: u32,
        to: u32,
        outer: &[u8; crate::packet::VXLAN_OVERHEAD],
    ) -> Result<Redirect, BpfError> {
        Self::attach_with("xbrb_encap_redirect", from, to, Some(outer))
    }

    fn attach_prog(name: &'static str, from: u32, to: u32) -> Result<Redirect, BpfError> {
        Self::attach_with(name, from, to, None)
    }

    fn attach_with(
        name: &'static str,
        from: u32,
        to: u32,
        outer: Option<&[u8; crate::packet::VXLAN_OVERHEAD]>,
    ) -> Result<Redirect, BpfError> {
        let obj = load(REDIRECT, REDIRECT_OBJECT)?;
        if let Some(h) = outer {
            map(&obj, REDIRECT, "encap_hdr")?
                .update(&0u32.to_ne_bytes(), h, MapFlags::ANY)
                .map_err(op_err(REDIRECT, "writing encap_hdr"))?;
        }
        map(&obj, REDIRECT, "redirect_port")?
            .update(&0u32.to_ne_bytes(), &to.to_ne_bytes(), MapFlags::ANY)
            .map_err(op_err(REDIRECT, format!("devmap entry for ifindex {to}")))?;
        let link = attach(&obj, REDIRECT, name, from)?;
        Ok(Redirect {
            _link: link,
            _obj: obj,
        })
    }
}

impl std::fmt::Debug for Generator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Generator")
            .field("frame_len", &self.frame.len())
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Mirror of bpf/xbrb_sink.c's bucket(), to check bucket_bounds().
    fn bucket(v: u64) -> usize {
        if v < 8 {
            return v as usize;
        }
        let l = 63 - v.leading_zeros() as u64;
        let b = l * 4 + ((v >> (l - 2)) & 3) - 4;
        (b as usize).min(HIST_BUCKETS - 1)
    }

    #[test]
    fn bucket_bounds_invert_the_sink_buckets() {
        for v in [
            0u64,
            1,
            7,
            8,
            9,
            10,
            11,
            12,
            15,
            16,
            100,
            1000,
            12_345,
            1 << 20,
            3 << 30,
        ] {
            let (lo, hi) = bucket_bounds(bucket(v));
            assert!(
                lo <= v && v < hi,
                "{v} not in [{lo}, {hi}) of bucket {}",
                bucket(v)
            );
        }
        for b in 8..HIST_BUCKETS - 1 {
            assert_eq!(bucket_bounds(b).1, bucket_bounds(b + 1).0, "bucket {b}");
        }
    }

    #[test]
    fn quantiles_come_from_the_histogram() {
        let mut hist = vec![0; HIST_BUCKETS];
        hist[bucket(1000)] = 98;
        hist[bucket(50_000)] = 2;
        let c = SinkCounters {
            packets: 100,
            bytes: 6000,
            tagged: 100,
            rejected: 0,
            hist,
        };
        let p50 = c.latency_quantile_ns(0.5).unwrap();
        let p99 = c.latency_quantile_ns(0.99).unwrap();
        assert!((896.0..1152.0).contains(&p50), "{p50}");
        assert!((40_000.0..60_000.0).contains(&p99), "{p99}");
        let none = SinkCounters {
            packets: 0,
            bytes: 0,
            tagged: 0,
            rejected: 0,
            hist: vec![0; HIST_BUCKETS],
        };
        assert_eq!(none.latency_quantile_ns(0.5), None);
    }
}
