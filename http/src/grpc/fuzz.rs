//! The fuzz harness for the message framing (`fuzz/fuzz_targets/grpc_messages.rs`): the
//! fuzzer's bytes as a response body arriving in pieces. Not an API.
//!
//! It panics on what the decoder must never do: panic itself, return a message over its
//! limit, or return other bytes than the body framed. An identity body that decodes is
//! re-framed and must equal the bytes read.

use super::{Decoder, Encoding, encode};

/// `data[0]`: bit 0 picks gzip, bits 1–7 the piece size (1–128 bytes); `data[1]` the limit
/// (2^(`data[1]` % 20) bytes); the rest is the body.
pub fn messages(data: &[u8]) {
    let [mode, limit, body @ ..] = data else {
        return;
    };
    let encoding = if mode & 1 == 1 {
        Encoding::Gzip
    } else {
        Encoding::Identity
    };
    let piece = usize::from(mode >> 1) + 1;
    let max = 1usize << (limit % 20);
    let mut d = Decoder::new(max, encoding);
    let mut got = Vec::new();
    let mut failed = false;
    'feed: for chunk in body.chunks(piece) {
        d.push(chunk);
        loop {
            match d.next() {
                Ok(Some(m)) => {
                    assert!(m.len() <= max, "a {}-byte message past {max}", m.len());
                    got.push(m);
                }
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(d.messages(), got.len() as u64);
    if failed || encoding == Encoding::Gzip {
        return;
    }
    let mut framed = Vec::new();
    for m in &got {
        encode(m, Encoding::Identity, &mut framed);
    }
    assert_eq!(
        &body[..framed.len()],
        &framed[..],
        "messages differ from the body"
    );
    match d.finish() {
        Ok(()) => assert_eq!(framed.len(), body.len(), "bytes left unread"),
        Err(_) => assert!(framed.len() < body.len(), "truncated with nothing left"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_run_clean() {
        super::messages(&[0, 10, 0, 0, 0, 0, 3, 1, 2, 3, 0, 0, 0, 0, 0]);
        super::messages(&[7, 10, 0, 0, 0, 0, 3, 1, 2]);
        super::messages(&[1, 10, 1, 0, 0, 0, 3, 1, 2, 3]);
        super::messages(&[0, 2, 0, 0, 0, 0, 9]);
    }
}
