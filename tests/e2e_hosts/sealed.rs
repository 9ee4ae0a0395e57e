//! The sealed namespace: the rule of docs/reliability.md ("Local hosts: a
//! sealed network"), checked from inside as a command sees it.

use std::net::{SocketAddr, TcpStream};
use std::process::Command;
use std::time::Duration;

use super::hosts::{Hosts, keygen};
use super::support::{Project, workspace_root};

/// Runs `scripts/local-hosts ARGS` to its end: (status, stdout, stderr).
fn local_hosts(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(workspace_root().join("scripts/local-hosts"))
        .args(args)
        .output()
        .expect("run scripts/local-hosts");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_command_under_local_hosts_has_no_route_but_the_bridge() {
    let (code, routes, err) = local_hosts(&["ip", "-4", "route", "show", "table", "all"]);
    assert_eq!(code, 0, "{err}");
    let mut main: Vec<&str> = routes
        .lines()
        .filter(|l| !l.starts_with("local ") && !l.starts_with("broadcast "))
        .collect();
    main.sort();
    assert_eq!(
        main,
        [
            "10.0.0.0/8 dev flowbr0 proto kernel scope link src 10.0.0.1 ",
            "172.16.0.0/12 dev flowbr0 proto kernel scope link src 172.16.0.1 ",
            "192.168.0.0/16 dev flowbr0 proto kernel scope link src 192.168.0.1 ",
        ],
        "every route:\n{routes}"
    );
    // The local table is loopback's and the bridge's own addresses only.
    for line in routes
        .lines()
        .filter(|l| l.starts_with("local ") || l.starts_with("broadcast "))
    {
        assert!(
            line.contains(" dev lo ") || line.contains(" dev flowbr0 "),
            "{line}"
        );
    }
    let (code, links, err) = local_hosts(&["ip", "-o", "link", "show"]);
    assert_eq!(code, 0, "{err}");
    let names: Vec<&str> = links.lines().filter_map(|l| l.split(": ").nth(1)).collect();
    assert_eq!(names, ["lo", "flowbr0"], "{links}");
    let (code, v6, err) = local_hosts(&["ip", "-6", "route", "show", "table", "all"]);
    assert_eq!((code, v6.trim()), (0, ""), "{err}");
}

#[test]
fn inside_nothing_outside_the_bridge_is_reachable_and_a_host_is_a_namespace_of_its_own() {
    let hosts = Hosts::start();
    let p = Project::new();
    let key = keygen(p.path(), "key");
    let public = std::fs::read_to_string(key.with_extension("pub")).expect("public key");
    let _inside = hosts.enter();
    // TEST-NET-1 (RFC 5737): no route, so not one packet is sent.
    let outside: SocketAddr = "192.0.2.1:80".parse().expect("address");
    let err = TcpStream::connect_timeout(&outside, Duration::from_secs(2))
        .expect_err("192.0.2.1 is outside the bridge: nothing may answer");
    assert_eq!(err.raw_os_error(), Some(libc::ENETUNREACH), "{err}");

    let answer = hosts.call(&serde_json::json!({"op": "start", "hosts": [{
        "id": "i-sealed", "ip": "10.0.7.4", "hostname": "ip-10-0-7-4.ec2.internal",
        "user": "ec2-user", "authorized_keys": public}]}));
    assert_eq!(answer["ok"], true, "{answer}");
    let host = &answer["hosts"][0];
    let out = hosts.ssh(
        host,
        &key,
        "hostname; readlink /proc/1/ns/net; echo >/dev/tcp/192.0.2.1/80",
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let mut lines = stdout.lines();
    assert_eq!(
        lines.next(),
        Some("ip-10-0-7-4.ec2.internal"),
        "{stdout}{stderr}"
    );
    let host_netns = lines.next().expect("the host's netns");
    let sealed_netns = std::fs::read_link("/proc/thread-self/ns/net").expect("netns");
    assert_ne!(
        host_netns,
        sealed_netns.to_string_lossy(),
        "the host has a netns of its own"
    );
    // The test process's main thread never entered: the machine's own.
    let outer = std::fs::read_link("/proc/self/ns/net").expect("netns");
    assert_ne!(
        sealed_netns, outer,
        "this thread is inside the sealed namespace"
    );
    assert_ne!(host_netns, outer.to_string_lossy());
    assert!(
        stderr.contains("Network is unreachable"),
        "from the host, 192.0.2.1 must have no route: {stderr}"
    );
    // A key the host was not given is refused.
    let stranger = keygen(p.path(), "stranger");
    let refused = hosts.ssh(host, &stranger, "true");
    assert_eq!(refused.status.code(), Some(255), "{refused:?}");
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("Permission denied"),
        "{refused:?}"
    );
}
