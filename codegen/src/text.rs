//! The only ways user text (node, input and buffer names from the graph) reaches generated code:
//! as a comment, or as part of an identifier. Both keep a safe subset of ASCII and replace the
//! rest, so that no name can end a comment line, splice the next line onto it (a trailing
//! backslash), open a preprocessor directive or change what an identifier refers to. The graph
//! reader already refuses control characters; this holds even for text that did not come from it.

/// `text` as it may appear after `//` on one line of generated code: printable ASCII other than
/// the backslash, each other character as `?`; at most 160 characters.
pub fn comment(text: &str) -> String {
    let mut out: String = text
        .chars()
        .take(160)
        .map(|c| {
            if (c.is_ascii_graphic() || c == ' ') && c != '\\' {
                c
            } else {
                '?'
            }
        })
        .collect();
    if text.chars().count() > 160 {
        out.push_str("...");
    }
    out
}

/// `text` as part of a C identifier: ASCII letters and digits, every other character as `_`; at
/// most 32 characters. Callers prefix it (it may start with a digit) and add what makes it unique.
pub fn identifier(text: &str) -> String {
    text.chars()
        .take(32)
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn comments_and_identifiers_keep_only_safe_text() {
        assert_eq!(comment("a, b"), "a, b");
        assert_eq!(
            comment("x\n#include \"/etc/hostname\""),
            "x?#include \"/etc/hostname\""
        );
        assert_eq!(comment("a\\"), "a?");
        assert_eq!(comment("é\u{2028}\0"), "???");
        assert!(comment(&"x".repeat(500)).len() < 170);
        assert_eq!(identifier("mlp.gate-up"), "mlp_gate_up");
        assert_eq!(identifier("a\nb"), "a_b");
        assert_eq!(identifier(&"é".repeat(50)).len(), 32);
    }
}
