//! RFC 7541's examples, the decoder's errors and limits, and the encoder's request blocks.

use http::{HeaderMap, HeaderName, Method};

use super::{
    Decoded, Decoder, MAX_LIST_FIELDS, MAX_LIST_SIZE, Name,
    decoder::{KEEP_FIELDS, KEEP_SCRATCH},
    encode_request,
    encoder::put_integer,
};

/// Bytes from hex digits, whitespace ignored (the RFC's examples as printed).
pub(crate) fn hex(s: &str) -> Vec<u8> {
    let s: String = s.split_whitespace().collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

fn fields(d: &mut Decoder, block: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    d.decode(&hex(block), &mut out).unwrap();
    out.into_iter()
        .map(|(n, v)| {
            let n = match n {
                Name::Status => ":status".to_owned(),
                Name::Pseudo => ":pseudo".to_owned(),
                Name::Header(h) => h.as_str().to_owned(),
                Name::Invalid => "!".to_owned(),
            };
            (n, String::from_utf8(v.to_vec()).unwrap())
        })
        .collect()
}

fn table(d: &Decoder) -> (usize, Vec<String>) {
    let names = d
        .table
        .iter()
        .map(|e| match &e.name {
            Name::Status => format!(":status: {}", String::from_utf8_lossy(&e.value)),
            Name::Header(h) => format!("{h}: {}", String::from_utf8_lossy(&e.value)),
            _ => "?".to_owned(),
        })
        .collect();
    (d.size, names)
}

/// RFC 7541 C.5 (plain) and C.6 (Huffman): three responses through a 256-byte table,
/// so entries are evicted.
#[test]
fn rfc_7541_responses_with_eviction() {
    let blocks = [
        (
            "4803 3330 3258 0770 7269 7661 7465 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3120 474d 546e 1768 7474 7073 3a2f 2f77 7777 2e65 7861 6d70 6c65 2e63 6f6d",
            "4882 6402 5885 aec3 771a 4b61 96d0 7abe 9410 54d4 44a8 2005 9504 0b81 66e0 82a6 2d1b ff6e 919d 29ad 1718 63c7 8f0b 97c8 e9ae 82ae 43d3",
        ),
        ("4803 3330 37c1 c0bf", "4883 640e ffc1 c0bf"),
        (
            "88c1 611d 4d6f 6e2c 2032 3120 4f63 7420 3230 3133 2032 303a 3133 3a32 3220 474d 54c0 5a04 677a 6970 7738 666f 6f3d 4153 444a 4b48 514b 425a 584f 5157 454f 5049 5541 5851 5745 4f49 553b 206d 6178 2d61 6765 3d33 3630 303b 2076 6572 7369 6f6e 3d31",
            "88c1 6196 d07a be94 1054 d444 a820 0595 040b 8166 e084 a62d 1bff c05a 839b d9ab 77ad 94e7 821d d7f2 e6c7 b335 dfdf cd5b 3960 d5af 2708 7f36 72c1 ab27 0fb5 291f 9587 3160 65c0 03ed 4ee5 b106 3d50 07",
        ),
    ];
    let pairs = |v: &[(&str, &str)]| -> Vec<(String, String)> {
        v.iter()
            .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
            .collect()
    };
    let want = [
        pairs(&[
            (":status", "302"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("location", "https://www.example.com"),
        ]),
        pairs(&[
            (":status", "307"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:21 GMT"),
            ("location", "https://www.example.com"),
        ]),
        pairs(&[
            (":status", "200"),
            ("cache-control", "private"),
            ("date", "Mon, 21 Oct 2013 20:13:22 GMT"),
            ("location", "https://www.example.com"),
            ("content-encoding", "gzip"),
            (
                "set-cookie",
                "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
            ),
        ]),
    ];
    let sizes = [222, 222, 215];
    for huffman in [false, true] {
        let mut d = Decoder::new();
        d.max = 256;
        for (i, (plain, coded)) in blocks.iter().enumerate() {
            let got = fields(&mut d, if huffman { coded } else { plain });
            assert_eq!(got, want[i], "huffman {huffman}, response {i}");
            assert_eq!(table(&d).0, sizes[i], "huffman {huffman}, response {i}");
        }
        assert_eq!(
            table(&d).1,
            vec![
                "set-cookie: foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1",
                "content-encoding: gzip",
                "date: Mon, 21 Oct 2013 20:13:22 GMT",
            ]
        );
    }
}

#[test]
fn size_updates_bad_huffman_and_bad_indexes_are_errors() {
    let mut d = Decoder::new();
    d.set_limit(0);
    let mut out = Vec::new();
    // Size update to 0, then a literal with incremental indexing: nothing is kept.
    d.decode(&hex("20 40 01 61 01 62 88"), &mut out).unwrap();
    assert_eq!((d.table.len(), out.len()), (0, 2));
    for (block, why) in [
        ("21", "above the limit"),
        ("88 20", "after a field"),
        ("be", "past the table"),
        ("80", "index 0"),
        ("0f", "truncated integer"),
        ("00 81 ff", "EOS-prefix longer than 7 bits"),
        ("00 84 ff ff ff ff", "EOS itself"),
        ("00 05 61", "string past the block"),
    ] {
        assert!(d.decode(&hex(block), &mut out).is_err(), "{why}");
    }
    // Padding of up to 7 one bits is fine: 'a' is 00011, then 111.
    out.clear();
    d.decode(&hex("00 81 1f 81 1f"), &mut out).unwrap();
    assert_eq!(out[0].0, Name::Header(HeaderName::from_static("a")));
    assert_eq!(&out[0].1[..], b"a");
}

/// Past the limits (30 000 one-byte indexed fields, then one to index): the block is
/// read to its end, so the table takes that last field, but nothing is kept, and the
/// room it took is given back. Right at the limits a list is whole.
#[test]
fn a_header_list_past_the_limits_is_read_through_and_dropped() {
    let mut d = Decoder::new();
    let mut out = Vec::new();
    // 0x90: accept-encoding: gzip, deflate (60 bytes as a list counts it).
    let mut block = vec![0x90; 30_000];
    block.extend_from_slice(&hex("40 06 782d6b657074 03 796573")); // x-kept: yes
    assert_eq!(d.decode(&block, &mut out), Ok(Decoded::TooLarge));
    assert!(out.is_empty());
    assert_eq!(table(&d).1, ["x-kept: yes"]);
    assert!(d.fields.capacity() <= KEEP_FIELDS);
    assert!(d.scratch.capacity() <= KEEP_SCRATCH);
    assert_eq!(fields(&mut d, "be"), [("x-kept".into(), "yes".into())]);
    for (n, want) in [
        (MAX_LIST_FIELDS, Decoded::Whole),
        (MAX_LIST_FIELDS + 1, Decoded::TooLarge),
    ] {
        out.clear();
        assert_eq!(d.decode(&vec![0x90; n], &mut out), Ok(want), "{n} fields");
    }
    // `a: xxx…`, 1 + 32 + the value's length.
    for (len, want) in [
        (MAX_LIST_SIZE - 33, Decoded::Whole),
        (MAX_LIST_SIZE - 32, Decoded::TooLarge),
    ] {
        let mut block = vec![0x00, 0x01, b'a'];
        put_integer(&mut block, 7, 0, len);
        block.resize(block.len() + len, b'x');
        out.clear();
        assert_eq!(d.decode(&block, &mut out), Ok(want), "a {len}-byte value");
    }
    assert!(d.scratch.capacity() <= KEEP_SCRATCH);
}

#[test]
fn a_request_block_uses_static_indexes_and_plain_literals() {
    let mut headers = HeaderMap::new();
    headers.insert("content-type", "application/json".parse().unwrap());
    headers.insert("x-key", "k".parse().unwrap());
    headers.insert("connection", "close".parse().unwrap());
    headers.insert("host", "elsewhere".parse().unwrap());
    let mut out = Vec::new();
    encode_request(
        &mut out,
        &Method::PUT,
        false,
        "a:1",
        "/x?y=1",
        &headers,
        Some(12),
    );
    let mut want = vec![0x02, 3, b'P', b'U', b'T', 0x86, 0x04, 6];
    want.extend_from_slice(b"/x?y=1");
    want.extend_from_slice(&[0x01, 3, b'a', b':', b'1']);
    want.extend_from_slice(&[0x0f, 31 - 15, 16]);
    want.extend_from_slice(b"application/json");
    want.extend_from_slice(&[0x00, 5]);
    want.extend_from_slice(b"x-key");
    want.extend_from_slice(&[1, b'k']);
    want.extend_from_slice(&[0x0f, 28 - 15, 2, b'1', b'2']);
    assert_eq!(out, want);
    // Our own decoder reads it back (pseudo-headers aside).
    let mut d = Decoder::new();
    let mut fields = Vec::new();
    d.decode(&out, &mut fields).unwrap();
    let names: Vec<_> = fields
        .iter()
        .filter_map(|(n, v)| match n {
            Name::Header(h) => Some(format!("{h}={}", String::from_utf8_lossy(v))),
            _ => None,
        })
        .collect();
    assert_eq!(
        names,
        [
            "content-type=application/json",
            "x-key=k",
            "content-length=12"
        ]
    );
}
