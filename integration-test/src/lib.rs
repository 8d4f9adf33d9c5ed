//! Fixtures for the privileged tests.
