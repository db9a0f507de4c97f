//! Network set-up in the guest with rtnetlink: interfaces up, addresses, routes, and a veth
//! pair into a service's network namespace. (No `ip` binary: a job image need not have one.)

use crate::sys;
use std::os::fd::AsRawFd;
use std::os::raw::c_char;

unsafe extern "C" {
    fn if_nametoindex(name: *const c_char) -> u32;
}

const RTM_NEWLINK: u16 = 16;
const RTM_NEWADDR: u16 = 20;
const RTM_NEWROUTE: u16 = 24;
const NLMSG_ERROR: u16 = 2;
const NLM_F_REQUEST: u16 = 1;
const NLM_F_ACK: u16 = 4;
const NLM_F_EXCL: u16 = 0x200;
const NLM_F_CREATE: u16 = 0x400;
const IFF_UP: u32 = 1;
const IFLA_IFNAME: u16 = 3;
const IFLA_LINKINFO: u16 = 18;
const IFLA_NET_NS_FD: u16 = 28;
const IFLA_INFO_KIND: u16 = 1;
const IFLA_INFO_DATA: u16 = 2;
const VETH_INFO_PEER: u16 = 1;
const IFA_ADDRESS: u16 = 1;
const IFA_LOCAL: u16 = 2;
const RTA_GATEWAY: u16 = 5;
const AF_INET: u8 = 2;
const RT_TABLE_MAIN: u8 = 254;
const RTPROT_BOOT: u8 = 3;
const RT_SCOPE_UNIVERSE: u8 = 0;
const RTN_UNICAST: u8 = 1;
const NETLINK_ROUTE: i32 = 0;

fn err(msg: String) -> std::io::Error {
    std::io::Error::other(msg)
}

/// An IPv4 address and prefix length, parsed from `a.b.c.d/n`.
pub fn parse_cidr(s: &str) -> std::io::Result<([u8; 4], u8)> {
    let (ip, prefix) = s.split_once('/').unwrap_or((s, "32"));
    let addr: std::net::Ipv4Addr = ip.parse().map_err(|_| err(format!("bad address {s}")))?;
    let prefix: u8 = prefix
        .parse()
        .ok()
        .filter(|p| *p <= 32)
        .ok_or_else(|| err(format!("bad prefix in {s}")))?;
    Ok((addr.octets(), prefix))
}

/// An attribute: length, type, value, padded to 4 bytes.
fn attr(out: &mut Vec<u8>, ty: u16, value: &[u8]) {
    let len = 4 + value.len();
    out.extend_from_slice(&(len as u16).to_ne_bytes());
    out.extend_from_slice(&ty.to_ne_bytes());
    out.extend_from_slice(value);
    while !out.len().is_multiple_of(4) {
        out.push(0);
    }
}

/// A nested attribute holding `inner`.
fn nested(out: &mut Vec<u8>, ty: u16, inner: &[u8]) {
    attr(out, ty, inner);
}

fn ifinfomsg(index: i32, flags: u32, change: u32) -> Vec<u8> {
    let mut m = vec![0u8, 0];
    m.extend_from_slice(&0u16.to_ne_bytes());
    m.extend_from_slice(&index.to_ne_bytes());
    m.extend_from_slice(&flags.to_ne_bytes());
    m.extend_from_slice(&change.to_ne_bytes());
    m
}

/// Sends one request and waits for its acknowledgement.
fn request(ty: u16, flags: u16, body: &[u8]) -> std::io::Result<()> {
    let fd = sys::new_socket(sys::AF_NETLINK, sys::SOCK_RAW, NETLINK_ROUTE)?;
    // SAFETY: a new descriptor we own; closed when `sock` drops.
    let sock = unsafe { <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    let mut msg = Vec::with_capacity(16 + body.len());
    msg.extend_from_slice(&((16 + body.len()) as u32).to_ne_bytes());
    msg.extend_from_slice(&ty.to_ne_bytes());
    msg.extend_from_slice(&(flags | NLM_F_REQUEST | NLM_F_ACK).to_ne_bytes());
    msg.extend_from_slice(&1u32.to_ne_bytes());
    msg.extend_from_slice(&0u32.to_ne_bytes());
    msg.extend_from_slice(body);
    sys::send_all(sock.as_raw_fd(), &msg)?;
    let mut buf = vec![0u8; 8192];
    let n = sys::recv_some(sock.as_raw_fd(), &mut buf)?;
    if n < 20 {
        return Err(err("short netlink answer".into()));
    }
    let kind = u16::from_ne_bytes([buf[4], buf[5]]);
    if kind != NLMSG_ERROR {
        return Err(err(format!("unexpected netlink answer {kind}")));
    }
    let code = i32::from_ne_bytes([buf[16], buf[17], buf[18], buf[19]]);
    if code != 0 {
        return Err(std::io::Error::from_raw_os_error(-code));
    }
    Ok(())
}

/// The index of interface `name` in the current network namespace.
pub fn index(name: &str) -> std::io::Result<i32> {
    let c = std::ffi::CString::new(name).map_err(|_| err("NUL in a name".into()))?;
    // SAFETY: valid C string.
    let i = unsafe { if_nametoindex(c.as_ptr()) };
    if i == 0 {
        Err(err(format!("no interface {name}")))
    } else {
        Ok(i as i32)
    }
}

/// Brings interface `name` up.
pub fn up(name: &str) -> std::io::Result<()> {
    let i = index(name)?;
    request(RTM_NEWLINK, 0, &ifinfomsg(i, IFF_UP, IFF_UP))
}

/// Gives interface `name` the address `cidr`.
pub fn address(name: &str, cidr: &str) -> std::io::Result<()> {
    let (ip, prefix) = parse_cidr(cidr)?;
    let i = index(name)?;
    let mut m = vec![AF_INET, prefix, 0, RT_SCOPE_UNIVERSE];
    m.extend_from_slice(&(i as u32).to_ne_bytes());
    attr(&mut m, IFA_LOCAL, &ip);
    attr(&mut m, IFA_ADDRESS, &ip);
    request(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &m)
}

/// Adds a default route through `gateway`.
pub fn default_route(gateway: &str) -> std::io::Result<()> {
    let (gw, _) = parse_cidr(gateway)?;
    let mut m = vec![
        AF_INET,
        0,
        0,
        0,
        RT_TABLE_MAIN,
        RTPROT_BOOT,
        RT_SCOPE_UNIVERSE,
        RTN_UNICAST,
    ];
    m.extend_from_slice(&0u32.to_ne_bytes());
    attr(&mut m, RTA_GATEWAY, &gw);
    request(RTM_NEWROUTE, NLM_F_CREATE | NLM_F_EXCL, &m)
}

/// Creates a veth pair: `name` here, `peer` in the namespace `ns` is open on.
pub fn veth(name: &str, peer: &str, ns: &std::fs::File) -> std::io::Result<()> {
    let mut peer_msg = ifinfomsg(0, 0, 0);
    let mut peer_name = peer.as_bytes().to_vec();
    peer_name.push(0);
    attr(&mut peer_msg, IFLA_IFNAME, &peer_name);
    attr(
        &mut peer_msg,
        IFLA_NET_NS_FD,
        &(ns.as_raw_fd() as u32).to_ne_bytes(),
    );
    let mut data = Vec::new();
    nested(&mut data, VETH_INFO_PEER, &peer_msg);
    let mut info = Vec::new();
    attr(&mut info, IFLA_INFO_KIND, b"veth\0");
    nested(&mut info, IFLA_INFO_DATA, &data);
    let mut m = ifinfomsg(0, 0, 0);
    let mut own = name.as_bytes().to_vec();
    own.push(0);
    attr(&mut m, IFLA_IFNAME, &own);
    nested(&mut m, IFLA_LINKINFO, &info);
    request(RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, &m)
}

/// Runs `f` in the network namespace of `ns` (on a thread of its own, which alone enters it).
pub fn inside<T: Send + 'static>(
    ns: std::fs::File,
    f: impl FnOnce() -> std::io::Result<T> + Send + 'static,
) -> std::io::Result<T> {
    std::thread::spawn(move || {
        sys::enter_ns(ns.as_raw_fd())?;
        f()
    })
    .join()
    .map_err(|_| err("a network set-up thread panicked".into()))?
}

/// Makes the named network namespace `name` (kept by a bind mount under
/// [`crate::spawn::NETNS_DIR`]) with its loopback up.
pub fn new_namespace(name: &str) -> std::io::Result<std::fs::File> {
    let dir = crate::spawn::NETNS_DIR;
    std::fs::create_dir_all(dir)?;
    let path = format!("{dir}/{name}");
    std::fs::File::create(&path)?;
    let p = path.clone();
    std::thread::spawn(move || -> std::io::Result<()> {
        sys::unshare_net()?;
        sys::mount_fs("/proc/thread-self/ns/net", &p, "", sys::MS_BIND, "")?;
        up("lo")
    })
    .join()
    .map_err(|_| err("a network set-up thread panicked".into()))??;
    std::fs::File::open(&path)
}

/// The IPv4 addresses of service `n`'s point-to-point link: (the VM's side, the service's).
pub fn service_addresses(n: u8) -> (String, String) {
    (format!("172.30.{n}.1/30"), format!("172.30.{n}.2/30"))
}

/// A network namespace `name` for service `n`, linked to this namespace by a veth pair
/// (`fl-svc<n>` here at 172.30.n.1, `eth0` there at 172.30.n.2, its default route back
/// here); forwarding is turned on so services reach each other. Returns the service's
/// address.
pub fn service_namespace(name: &str, n: u8) -> std::io::Result<String> {
    let ns = new_namespace(name)?;
    let here = format!("fl-svc{n}");
    veth(&here, "eth0", &ns)?;
    let (mine, theirs) = service_addresses(n);
    address(&here, &mine)?;
    up(&here)?;
    let gw = mine.split('/').next().unwrap_or_default().to_string();
    let addr = theirs.clone();
    inside(ns, move || {
        address("eth0", &addr)?;
        up("eth0")?;
        default_route(&gw)
    })?;
    let _ = std::fs::write("/proc/sys/net/ipv4/ip_forward", "1\n");
    Ok(theirs.split('/').next().unwrap_or_default().to_string())
}
