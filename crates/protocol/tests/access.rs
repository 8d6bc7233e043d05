//! Who may call a shard (`cobordism_protocol::Access`): closed by default, and both tokens of a
//! rotation accepted. Here rather than beside the code: a must-fail build
//! (crates/protocol/must-fail.txt) must make these fail in their own assertions.

use cobordism_protocol::Access;

#[test]
fn closed_by_default() {
    let ok = Some("Bearer t0ken");
    assert_eq!(Access::decide(&[], false, ok), Access::NotConfigured);
    assert_eq!(Access::decide(&["", ""], false, ok), Access::NotConfigured);
    assert_eq!(Access::decide(&[], true, None), Access::Granted);
    assert_eq!(Access::decide(&["t0ken"], false, ok), Access::Granted);
    assert_eq!(Access::decide(&["t0ken"], true, ok), Access::Granted);
    assert_eq!(Access::decide(&["t0ken"], true, None), Access::Unauthorized);
    assert_eq!(
        Access::decide(&["t0ken"], false, Some("Bearer other")),
        Access::Unauthorized
    );
}

#[test]
fn a_rotation_accepts_the_new_and_the_previous_token_and_nothing_else() {
    let both = ["n3w", "0ld"];
    for (header, access) in [
        ("Bearer n3w", Access::Granted),
        ("Bearer 0ld", Access::Granted),
        ("Bearer n3w0ld", Access::Unauthorized),
        ("Bearer other", Access::Unauthorized),
        ("Bearer n3w, Bearer 0ld", Access::Unauthorized),
    ] {
        assert_eq!(
            Access::decide(&both, false, Some(header)),
            access,
            "{header}"
        );
    }
    assert_eq!(
        Access::decide(&["", "0ld"], false, Some("Bearer 0ld")),
        Access::Granted
    );
}
