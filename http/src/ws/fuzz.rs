//! The fuzz harness for the frame reader (`fuzz/fuzz_targets/ws_frames.rs`): the fuzzer's
//! bytes as a server's frames arriving in pieces. Not an API.
//!
//! It panics on what the reader must never do: panic itself, return a message over its
//! limit, a control payload over 125 bytes, a Close with a code no frame may carry, or
//! anything after a Close. Frame by frame, every frame it reads must write back (unmasked,
//! as a server writes it) to exactly the bytes it came from: the reader accepts only the
//! one encoding of each frame.

use super::{
    CloseCode, Message, Reader,
    frame::{MAX_CONTROL, write},
};

/// `data[0]`: the piece size (1–256 bytes); `data[1]`: the message limit (2^(`data[1]` % 24));
/// the rest is the server's bytes, read twice: as frames, and as messages.
pub fn frames(data: &[u8]) {
    let [piece, limit, bytes @ ..] = data else {
        return;
    };
    let piece = usize::from(*piece) + 1;
    let max = 1usize << (limit % 24);

    // Frames: each one written back equals its bytes.
    let mut r = Reader::new(max);
    let mut offset = 0;
    'frames: for chunk in bytes.chunks(piece) {
        r.push(chunk);
        loop {
            match r.next_frame() {
                Ok(Some(f)) => {
                    let mut again = Vec::new();
                    write(&mut again, f.fin, f.opcode, &f.payload, None);
                    assert_eq!(
                        &bytes[offset..offset + again.len()],
                        &again[..],
                        "frame at {offset} reads back differently"
                    );
                    offset += again.len();
                }
                Ok(None) => break,
                Err(_) => break 'frames,
            }
        }
    }

    // Messages.
    let mut r = Reader::new(max);
    let mut closed = false;
    'messages: for chunk in bytes.chunks(piece) {
        r.push(chunk);
        loop {
            match r.next() {
                Ok(Some(m)) => {
                    assert!(!closed, "a message after the Close");
                    match m {
                        Message::Text(t) => assert!(t.len() <= max),
                        Message::Binary(b) => assert!(b.len() <= max),
                        Message::Ping(p) | Message::Pong(p) => assert!(p.len() <= MAX_CONTROL),
                        Message::Close(c) => {
                            assert!(
                                c.code == CloseCode::NO_STATUS || c.code.is_sendable(),
                                "close code {}",
                                c.code.0
                            );
                            assert!(c.reason.len() <= MAX_CONTROL - 2);
                            closed = true;
                        }
                    }
                }
                Ok(None) => break,
                Err(_) => break 'messages,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn seeds_run_clean() {
        super::frames(&[0, 10, 0x81, 2, b'h', b'i', 0x89, 0, 0x88, 2, 3, 0xe8]);
        super::frames(&[3, 20, 0x01, 1, b'a', 0x8a, 0, 0x80, 1, b'b']);
        super::frames(&[255, 2, 0x82, 0x7e, 0, 200]);
    }
}
