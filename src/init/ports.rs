//! Compose's `ports:` entries read as compose reads them, once
//! interpolated: which container port each names, and over which
//! protocol. `init` needs no more (the host side is Binky's allocator's).

/// The container port (the first of a range) and protocol of a `ports:`
/// entry, interpolated: `[IP:][HOST:]CONTAINER[/PROTO]` with ranges and
/// `[::1]` host IPs, or the long syntax's `target`.
///
/// # Errors
/// What compose would refuse: a port that is no number from 1 to 65535,
/// a range that runs backwards, a protocol other than tcp, udp or sctp.
pub(super) fn parse_port(text: &str, long_protocol: Option<&str>) -> Result<(u16, String), String> {
    let (spec, protocol) = match (long_protocol, text.rsplit_once('/')) {
        (Some(p), _) => (text, p),
        (None, Some((s, p))) => (s, p),
        (None, None) => (text, "tcp"),
    };
    let protocol = protocol.to_ascii_lowercase();
    if !["tcp", "udp", "sctp"].contains(&protocol.as_str()) {
        return Err(format!("protocol `{protocol}` is none of tcp, udp, sctp"));
    }
    let spec = spec.trim();
    // A bracketed IPv6 host IP first, then HOST:CONTAINER or CONTAINER;
    // an IPv4 host IP makes three parts.
    let rest = match spec.strip_prefix('[') {
        Some(r) => {
            let (_, after) = r.split_once(']').ok_or("an unclosed `[` in the host IP")?;
            after.strip_prefix(':').ok_or("nothing after the host IP")?
        }
        None => spec,
    };
    let parts: Vec<&str> = rest.split(':').collect();
    let (host, container) = match (long_protocol, parts.as_slice()) {
        (Some(_), [c]) => (None, *c),
        (None, [c]) => (None, *c),
        (None, [h, c]) => (Some(*h), *c),
        (None, [_ip, h, c]) if !spec.starts_with('[') => (Some(*h), *c),
        _ => return Err("expected [HOST_IP:][HOST_PORT:]CONTAINER_PORT[/PROTOCOL]".into()),
    };
    if let Some(h) = host.filter(|h| !h.is_empty()) {
        port_range(h)?;
    }
    Ok((port_range(container)?, protocol))
}

/// The first port of `8080` or `8080-8085`.
fn port_range(s: &str) -> Result<u16, String> {
    let one = |p: &str| -> Result<u16, String> {
        match p.trim().parse::<u16>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!("`{}` is not a port (1 to 65535)", p.trim())),
        }
    };
    match s.split_once('-') {
        Some((a, b)) => {
            let (a, b) = (one(a)?, one(b)?);
            if a > b {
                return Err(format!("the range {a}-{b} runs backwards"));
            }
            Ok(a)
        }
        None => one(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_forms() {
        let p = |s: &str| parse_port(s, None);
        assert_eq!(p("8080"), Ok((8080, "tcp".into())));
        assert_eq!(p("3000:80"), Ok((80, "tcp".into())));
        assert_eq!(p("127.0.0.1:5432:5432/tcp"), Ok((5432, "tcp".into())));
        assert_eq!(p("[::1]:6000:6001"), Ok((6001, "tcp".into())));
        assert_eq!(p("9090-9091:8080-8081"), Ok((8080, "tcp".into())));
        assert_eq!(p("53:53/UDP"), Ok((53, "udp".into())));
        assert_eq!(p(":80"), Ok((80, "tcp".into())));
        assert_eq!(parse_port("80", Some("tcp")), Ok((80, "tcp".into())));
        for bad in [
            "abc", "99999:80", "-1", "0", "80/http", "1:2:3:4", "[::1:80", "90-80",
        ] {
            assert!(p(bad).is_err(), "{bad}");
        }
    }
}
