//! Close frames: a 2-byte code and a UTF-8 reason (RFC 6455 §5.5.1, §7.4), and the codes'
//! names as herd's outcomes use them (`normal`, `going_away`, …, `application` for the
//! 4000–4999 a service picks for itself).

use super::Error;

/// A close code, as sent in a Close frame or standing for none (1005, 1006).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CloseCode(pub u16);

impl CloseCode {
    /// 1000: the purpose of the connection is fulfilled.
    pub const NORMAL: Self = Self(1000);
    /// 1001: the endpoint is going away (server shutdown, page navigated away).
    pub const GOING_AWAY: Self = Self(1001);
    /// 1002: a protocol error.
    pub const PROTOCOL_ERROR: Self = Self(1002);
    /// 1003: a data type the endpoint cannot accept.
    pub const UNSUPPORTED_DATA: Self = Self(1003);
    /// 1005: the Close frame had no code (never sent on the wire).
    pub const NO_STATUS: Self = Self(1005);
    /// 1006: the connection closed without a Close frame (never sent on the wire).
    pub const ABNORMAL: Self = Self(1006);
    /// 1007: a message whose data is not of its type (text that is not UTF-8).
    pub const INVALID_PAYLOAD: Self = Self(1007);
    /// 1008: a message that violates the endpoint's policy.
    pub const POLICY_VIOLATION: Self = Self(1008);
    /// 1009: a message too big to process.
    pub const MESSAGE_TOO_BIG: Self = Self(1009);
    /// 1010: the client expected an extension the server did not negotiate.
    pub const MANDATORY_EXTENSION: Self = Self(1010);
    /// 1011: the server hit an unexpected condition.
    pub const INTERNAL_ERROR: Self = Self(1011);
    /// 1012: the service is restarting.
    pub const SERVICE_RESTART: Self = Self(1012);
    /// 1013: try again later (overload).
    pub const TRY_AGAIN_LATER: Self = Self(1013);
    /// 1014: a gateway got a bad response upstream.
    pub const BAD_GATEWAY: Self = Self(1014);
    /// 1015: the TLS handshake failed (never sent on the wire).
    pub const TLS_HANDSHAKE: Self = Self(1015);

    /// The code's name in lower snake case: the IANA registry's meaning for 1000–1015,
    /// `registered` for 3000–3999 (libraries and frameworks), `application` for 4000–4999
    /// (the service's own), `invalid` for the rest.
    pub fn name(self) -> &'static str {
        match self.0 {
            1000 => "normal",
            1001 => "going_away",
            1002 => "protocol_error",
            1003 => "unsupported_data",
            1005 => "no_status",
            1006 => "abnormal",
            1007 => "invalid_payload",
            1008 => "policy_violation",
            1009 => "message_too_big",
            1010 => "mandatory_extension",
            1011 => "internal_error",
            1012 => "service_restart",
            1013 => "try_again_later",
            1014 => "bad_gateway",
            1015 => "tls_handshake",
            3000..=3999 => "registered",
            4000..=4999 => "application",
            _ => "invalid",
        }
    }

    /// True for a code a Close frame may carry (RFC 6455 §7.4.1, the IANA registry):
    /// 1000–1003, 1007–1014, 3000–4999. 1004–1006 and 1015 are reserved, and nothing below
    /// 1000 or from 1016 to 2999 is assigned.
    pub fn is_sendable(self) -> bool {
        matches!(self.0, 1000..=1003 | 1007..=1014 | 3000..=4999)
    }
}

impl std::fmt::Display for CloseCode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.0, self.name())
    }
}

/// A Close frame's body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Close {
    /// The code; [`CloseCode::NO_STATUS`] for a Close frame with an empty body.
    pub code: CloseCode,
    /// Why, in UTF-8; often empty.
    pub reason: String,
}

impl Close {
    /// A close with this code and reason.
    pub fn new(code: CloseCode, reason: impl Into<String>) -> Self {
        Self {
            code,
            reason: reason.into(),
        }
    }

    /// A Close frame's payload read: empty, or a sendable code and a UTF-8 reason.
    pub fn parse(payload: &[u8]) -> Result<Self, Error> {
        match payload {
            [] => Ok(Self::new(CloseCode::NO_STATUS, "")),
            [_] => Err(Error::CloseBody),
            [a, b, reason @ ..] => {
                let code = CloseCode(u16::from_be_bytes([*a, *b]));
                if !code.is_sendable() {
                    return Err(Error::CloseCode(code.0));
                }
                let reason = std::str::from_utf8(reason).map_err(|e| Error::CloseReason {
                    offset: e.valid_up_to(),
                })?;
                Ok(Self::new(code, reason))
            }
        }
    }

    /// The payload to send: code and reason, cut at a character boundary so the whole fits
    /// a control frame (125 bytes); empty for [`CloseCode::NO_STATUS`].
    pub fn payload(&self) -> Vec<u8> {
        if self.code == CloseCode::NO_STATUS {
            return Vec::new();
        }
        let mut end = self.reason.len().min(123);
        while !self.reason.is_char_boundary(end) {
            end -= 1;
        }
        let mut p = Vec::with_capacity(2 + end);
        p.extend_from_slice(&self.code.0.to_be_bytes());
        p.extend_from_slice(&self.reason.as_bytes()[..end]);
        p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert_eq!(CloseCode(1000).name(), "normal");
        assert_eq!(CloseCode(1011).name(), "internal_error");
        assert_eq!(CloseCode(1012).name(), "service_restart");
        assert_eq!(CloseCode(1013).name(), "try_again_later");
        assert_eq!(CloseCode(1014).name(), "bad_gateway");
        assert_eq!(CloseCode(3001).name(), "registered");
        assert_eq!(CloseCode(4000).name(), "application");
        assert_eq!(CloseCode(4999).name(), "application");
        assert_eq!(CloseCode(5000).name(), "invalid");
        assert_eq!(CloseCode(4001).to_string(), "4001 (application)");
    }

    #[test]
    fn which_codes_a_frame_may_carry() {
        let sendable: Vec<u16> = (0..=5000).filter(|&c| CloseCode(c).is_sendable()).collect();
        assert_eq!(sendable.len(), 4 + 8 + 2000);
        for c in [999, 1004, 1005, 1006, 1015, 1016, 2999, 5000] {
            assert!(!CloseCode(c).is_sendable(), "{c}");
        }
    }

    #[test]
    fn parse_and_payload() {
        let c = Close::parse(b"\x0f\xa1bye").unwrap();
        assert_eq!(c, Close::new(CloseCode(4001), "bye"));
        assert_eq!(c.payload(), b"\x0f\xa1bye");
        assert_eq!(Close::parse(b"").unwrap().code, CloseCode::NO_STATUS);
        assert!(Close::new(CloseCode::NO_STATUS, "x").payload().is_empty());
        assert!(matches!(Close::parse(b"\x03"), Err(Error::CloseBody)));
        assert!(matches!(
            Close::parse(b"\x03\xed"),
            Err(Error::CloseCode(1005))
        ));
        assert!(matches!(
            Close::parse(b"\x03\xe8ok\xff"),
            Err(Error::CloseReason { offset: 2 })
        ));
        // A long reason is cut at a character boundary to fit 125 bytes.
        let long = "é".repeat(100);
        let p = Close::new(CloseCode::NORMAL, long).payload();
        assert_eq!(p.len(), 124);
        assert!(Close::parse(&p).is_ok());
    }
}
