//! The fuzz harnesses ([`super::super::fuzz`]) on the seed inputs the fuzz targets start
//! from, and on every input the fuzzer found a bug with. The seeds are built here and
//! written to `fuzz/seeds/` by `UPDATE_SEEDS=1 cargo test -p herd-driver seeds`.

use std::path::Path;

use super::{super::fuzz, *};

fn frame(kind: u8, flags: u8, id: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::new();
    frame_head(&mut f, payload.len(), kind, flags, id);
    f.extend_from_slice(payload);
    f
}

/// A plan for [`fuzz::client`] (see there): arrival, writes, tasks, their calls.
fn plan(arrival: u8, writes: u8, calls: &[u8]) -> Vec<u8> {
    assert!(calls.len().is_multiple_of(2) && calls.len() <= 8);
    let mut p = vec![arrival, writes, (calls.len() / 2 - 1) as u8];
    p.extend_from_slice(calls);
    p
}

/// A server's bytes: frames one after the other.
fn server(frames: &[Vec<u8>]) -> Vec<u8> {
    frames.concat()
}

/// Seeds per harness: (target, file name, input).
fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let ok = head_block(200, &[("x-test", "1")]);
    let mut padded_head = vec![2, 0x80, 0, 0, 0, 15];
    padded_head.extend_from_slice(&ok[..3]);
    padded_head.extend_from_slice(&[0, 0]);
    let mut padded_data = vec![3];
    padded_data.extend_from_slice(b"hello");
    padded_data.extend_from_slice(&[0; 3]);
    let mut goaway = 5u32.to_be_bytes().to_vec();
    goaway.extend_from_slice(&NO_ERROR.to_be_bytes());
    goaway.extend_from_slice(b"bye");
    let two_gets = server(&[
        frame(SETTINGS, ACK, 0, &[]),
        frame(HEADERS, END_HEADERS, 1, &ok),
        frame(DATA, END_STREAM, 1, b"ok"),
        frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x88]),
    ]);
    let pieces = server(&[
        frame(
            HEADERS,
            END_HEADERS,
            1,
            &head_block(103, &[("link", "</a>")]),
        ),
        frame(HEADERS, PADDED | PRIORITY_FLAG, 1, &padded_head),
        frame(CONTINUATION, END_HEADERS, 1, &ok[3..]),
        frame(DATA, PADDED, 1, &padded_data),
        frame(PING, 0, 0, b"12345678"),
        frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &[0x00, 1, b'x', 1, b'y'],
        ),
        frame(RST_STREAM, 0, 3, &0x7u32.to_be_bytes()),
        frame(WINDOW_UPDATE, 0, 0, &100_000u32.to_be_bytes()),
        frame(WINDOW_UPDATE, 0, 5, &100_000u32.to_be_bytes()),
        frame(HEADERS, END_HEADERS, 5, &ok),
        frame(DATA, 0, 5, b"event 1\n"),
        frame(GOAWAY, 0, 0, &goaway),
        frame(DATA, END_STREAM, 5, b"event 2\n"),
    ]);
    let mut settings = Vec::new();
    for (k, v) in [(0x3u16, 1u32), (0x4, 100), (0x5, 20_000)] {
        settings.extend_from_slice(&k.to_be_bytes());
        settings.extend_from_slice(&v.to_be_bytes());
    }
    let limited = server(&[
        frame(SETTINGS, 0, 0, &settings),
        frame(WINDOW_UPDATE, 0, 1, &70_000u32.to_be_bytes()),
        frame(WINDOW_UPDATE, 0, 0, &70_000u32.to_be_bytes()),
        frame(HEADERS, END_HEADERS | END_STREAM, 1, &[0x88]),
        frame(HEADERS, END_HEADERS | END_STREAM, 3, &[0x88]),
    ]);
    let rfc = [
        "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        "4883 640e ffc1 c0bf",
        "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        "3fe1 1f 88",
    ];
    let mut blocks = vec![128]; // a 4 096-byte table
    for b in rfc {
        let b = hex(b);
        blocks.extend_from_slice(&(b.len() as u16).to_be_bytes());
        blocks.extend_from_slice(&b);
    }
    vec![
        (
            "h2_client",
            "two-gets",
            [plan(0x81, 4, &[0, 0]), two_gets.clone()].concat(),
        ),
        (
            "h2_client",
            "pieces-dry-stalled",
            [plan(0x81, 0x82, &[0x00, 0x08, 0x47, 0x02]), pieces.clone()].concat(),
        ),
        (
            "h2_client",
            "a-crowd-giving-up",
            [
                plan(2, 3, &[0x22, 0x45, 0x18, 0x63, 0x04, 0x06, 0x03, 0x10]),
                pieces,
            ]
            .concat(),
        ),
        (
            "h2_client",
            "settings-and-windows",
            [plan(4, 0x24, &[0x18, 0x10]), limited].concat(),
        ),
        ("h2_frames", "pieces", [vec![6], two_gets.clone()].concat()),
        ("h2_frames", "whole", [vec![255], two_gets].concat()),
        ("hpack", "rfc-7541-c6", blocks),
    ]
}

/// Every seed runs clean through its harness; `UPDATE_SEEDS=1` writes them where the fuzz
/// targets find them.
#[test]
fn seeds_run_clean() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fuzz/seeds");
    for (target, name, input) in seeds() {
        match target {
            "h2_client" => {
                let answered = fuzz::client(&input);
                let want = if name == "two-gets" { 2 } else { 1 };
                assert!(answered >= want, "{name}: {answered} calls answered");
            }
            "h2_frames" => fuzz::frames(&input),
            _ => fuzz::hpack(&input),
        }
        if std::env::var_os("UPDATE_SEEDS").is_some() {
            let d = dir.join(target);
            std::fs::create_dir_all(&d).unwrap();
            std::fs::write(d.join(name), &input).unwrap();
        }
    }
}
