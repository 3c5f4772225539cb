# shellcheck shell=bash
# Shared by .ci/run and scripts/*. Source it; do not run it.

# Everything building and testing xbr needs on Debian 12, besides a Rust
# toolchain: clang/llvm/libelf/zlib/pkg-config/make build the XDP program
# and libbpf; ovs-ofctl is the OpenFlow client under test; the rest are the
# tools the tests and the demo drive (iptables: the lab's MASQUERADE;
# systemd: systemd-analyze verify of the unit; libcap2-bin: capsh for the
# least-privilege tests; openvswitch-testcontroller: an OpenSSL-based ssl:
# controller for tests/tls.rs).
XBR_PACKAGES=(
    clang llvm libelf-dev zlib1g-dev pkg-config make
    openvswitch-common openvswitch-switch iproute2 tcpdump ethtool iputils-ping python3
    iptables iperf3
    prometheus
    python3-venv
    systemd libcap2-bin xz-utils
    buildah podman runc debootstrap
    openvswitch-testcontroller
)

log() { printf '[%(%H:%M:%S)T] %s\n' -1 "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

require_root() {
    [ "$(id -u)" -eq 0 ] || die "$1 needs root (network namespaces, veth pairs, XDP): run it as root"
}

install_packages() {
    apt-get update
    DEBIAN_FRONTEND=noninteractive apt-get install -y "${XBR_PACKAGES[@]}"
}

# cargo-deb (for scripts/deb), from crates.io, if missing. Its xz
# compressor builds from the bundled C source (LZMA_API_STATIC), never
# against a liblzma that apt may be installing meanwhile (.ci/run builds
# it while the packages install).
install_cargo_deb() {
    if ! cargo deb --version >/dev/null 2>&1; then
        log "installing cargo-deb"
        LZMA_API_STATIC=1 cargo install cargo-deb --locked
    fi
}

# cargo-fuzz (for scripts/fuzz), from crates.io, if missing.
install_cargo_fuzz() {
    if ! cargo fuzz --version >/dev/null 2>&1; then
        log "installing cargo-fuzz"
        cargo install cargo-fuzz --locked
    fi
}

# The cargo target directory (honours CARGO_TARGET_DIR like cargo does).
target_dir() {
    local dir=${CARGO_TARGET_DIR:-target}
    case $dir in
        /*) echo "$dir" ;;
        *) echo "$PWD/$dir" ;;
    esac
}
