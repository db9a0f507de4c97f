use super::*;
use proptest::prelude::*;

fn mask_all(m: &mut Masker, chunks: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for c in chunks {
        m.push(c, &mut out);
    }
    m.finish(&mut out);
    out
}

fn masked(secrets: &[&str], prefixes: &[&str], chunks: &[&str]) -> String {
    let mut m = Masker::new(secrets, prefixes);
    let chunks: Vec<&[u8]> = chunks.iter().map(|c| c.as_bytes()).collect();
    String::from_utf8(mask_all(&mut m, &chunks)).unwrap()
}

#[test]
fn secrets_are_replaced() {
    assert_eq!(
        masked(&["hunter2"], &[], &["my password is hunter2!"]),
        "my password is [MASKED]!"
    );
    assert_eq!(
        masked(&["abc"], &[], &["abcabc x abc"]),
        "[MASKED] x [MASKED]"
    );
    assert_eq!(masked(&[], &[], &["untouched"]), "untouched");
}

#[test]
fn a_secret_split_across_chunks_is_masked() {
    assert_eq!(
        masked(&["hunter2"], &[], &["pw: hun", "te", "r2 done"]),
        "pw: [MASKED] done"
    );
    // One byte at a time.
    let text = "xx s3cr3t yy";
    let chunks: Vec<String> = text.chars().map(|c| c.to_string()).collect();
    let chunks: Vec<&str> = chunks.iter().map(String::as_str).collect();
    assert_eq!(masked(&["s3cr3t"], &[], &chunks), "xx [MASKED] yy");
}

#[test]
fn only_a_possible_secret_start_is_held_back() {
    let mut m = Masker::new(&["secret"], &[] as &[&str]);
    let mut out = Vec::new();
    m.push(b"hello sec", &mut out);
    assert_eq!(out, b"hello ");
    assert_eq!(m.held_back(), 3);
    m.push(b"ond", &mut out);
    assert_eq!(out, b"hello second");
    assert_eq!(m.held_back(), 0);
    m.push(b" secre", &mut out);
    m.finish(&mut out);
    assert_eq!(out, b"hello second secre");
}

#[test]
fn overlapping_and_nested_secrets() {
    assert_eq!(masked(&["bc", "abcd"], &[], &["xabcdx"]), "x[MASKED]x");
    assert_eq!(masked(&["aab"], &[], &["aaab"]), "a[MASKED]");
    assert_eq!(masked(&["abab"], &[], &["ababab"]), "[MASKED]");
    assert_eq!(masked(&["ab", "cd"], &[], &["abcd"]), "[MASKED]");
}

#[test]
fn token_prefixes_mask_the_token_but_keep_the_prefix() {
    let mut m = Masker::for_job(&[] as &[&str], &["custom_".to_string()]);
    let out = mask_all(
        &mut m,
        &[
            b"a glpat-AbC_12.3=x- end; glrt-",
            b"zz9 and custom_tok! glcbt- x",
        ],
    );
    assert_eq!(
        String::from_utf8(out).unwrap(),
        "a glpat-[MASKED] end; glrt-[MASKED] and custom_[MASKED]! glcbt- x"
    );
}

#[test]
fn token_at_end_of_stream_is_masked() {
    assert_eq!(
        masked(&[], &["glpat-"], &["token glpat-abc", "def"]),
        "token glpat-[MASKED]"
    );
}

#[test]
fn all_byte_values_in_patterns() {
    let secret: Vec<u8> = (0..=255u8).collect();
    let mut m = Masker::new(std::slice::from_ref(&secret), &[] as &[&[u8]]);
    let mut input = b"<".to_vec();
    input.extend_from_slice(&secret);
    input.push(b'>');
    assert_eq!(mask_all(&mut m, &[&input]), b"<[MASKED]>");
}

fn chunked(data: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut cuts: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
    cuts.sort_unstable();
    let mut out = Vec::new();
    let mut last = 0;
    for c in cuts {
        out.push(data[last..c].to_vec());
        last = c;
    }
    out.push(data[last..].to_vec());
    out
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    /// Whatever the chunking, no secret survives, and the output equals the unchunked output.
    #[test]
    fn never_emits_a_secret(
        secrets in prop::collection::vec("[abc]{1,6}", 1..4),
        pieces in prop::collection::vec(prop_oneof!["[abcx ]{0,8}", "glpat-[abc]{0,4}"], 0..12),
        cuts in prop::collection::vec(0usize..200, 0..12),
    ) {
        let mut text = Vec::new();
        for (i, p) in pieces.iter().enumerate() {
            text.extend_from_slice(p.as_bytes());
            text.extend_from_slice(secrets[i % secrets.len()].as_bytes());
        }
        let mut whole = Masker::for_job(&secrets, &[]);
        let reference = mask_all(&mut whole, &[&text]);
        let chunks = chunked(&text, &cuts);
        let chunk_refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let mut m = Masker::for_job(&secrets, &[]);
        let out = mask_all(&mut m, &chunk_refs);
        prop_assert_eq!(&out, &reference);
        for s in &secrets {
            prop_assert!(!contains(&out, s.as_bytes()), "secret {:?} in {:?}", s, String::from_utf8_lossy(&out));
        }
        // After a token prefix, no token character is left.
        let s = String::from_utf8(out).unwrap();
        for (i, _) in s.match_indices("glpat-") {
            let next = s[i + 6..].chars().next();
            prop_assert!(matches!(next, None | Some(' ' | '[')), "{:?}", s);
        }
    }

    /// Text without any pattern passes through unchanged whatever the chunking.
    #[test]
    fn clean_text_is_unchanged(text in "[a-z \n]{0,200}", cuts in prop::collection::vec(0usize..300, 0..10)) {
        let mut m = Masker::new(&["SECRET"], &["glpat-"]);
        let chunks = chunked(text.as_bytes(), &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        prop_assert_eq!(mask_all(&mut m, &refs), text.as_bytes());
    }
}

/// Every occurrence of every secret replaced, overlapping and adjacent ones as one `[MASKED]`:
/// the plain definition the automaton must agree with.
fn masked_by_definition(text: &[u8], secrets: &[Vec<u8>]) -> Vec<u8> {
    let mut covered = vec![false; text.len()];
    for s in secrets.iter().filter(|s| !s.is_empty()) {
        for i in 0..text.len().saturating_sub(s.len() - 1) {
            if text[i..].starts_with(s) {
                covered[i..i + s.len()].fill(true);
            }
        }
    }
    let mut out = Vec::new();
    let mut i = 0;
    while i < text.len() {
        if covered[i] {
            out.extend_from_slice(MASK);
            while i < text.len() && covered[i] {
                i += 1;
            }
        } else {
            out.push(text[i]);
            i += 1;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(1000))]

    /// Secrets longer than the automaton's full rows reach (64 bytes), over a two-letter
    /// alphabet so that partial matches and failure links are everywhere: the masker agrees
    /// with the definition whatever the chunking. It fails when the deep states stop following
    /// their failure links.
    #[test]
    fn long_secrets_are_masked_as_defined(
        secrets in prop::collection::vec("[ab]{50,130}", 1..3),
        text in "[ab]{0,400}",
        inserts in prop::collection::vec((0usize..400, 0usize..3), 0..4),
        cuts in prop::collection::vec(0usize..900, 0..10),
    ) {
        let mut text = text.into_bytes();
        for (at, which) in inserts {
            let s = secrets[which % secrets.len()].as_bytes();
            let at = at.min(text.len());
            text.splice(at..at, s.iter().copied());
        }
        let secrets: Vec<Vec<u8>> = secrets.into_iter().map(String::into_bytes).collect();
        let chunks = chunked(&text, &cuts);
        let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let mut m = Masker::new(&secrets, &[] as &[&[u8]]);
        prop_assert_eq!(mask_all(&mut m, &refs), masked_by_definition(&text, &secrets));
    }
}

/// A 1 MiB masked value: the automaton's tables stay near 20 bytes per byte of the secret
/// (a full row per state took up to 1 KiB per byte: 1 GiB for this one), and the value is
/// masked wherever the log's chunks cut it.
#[test]
fn a_one_mebibyte_secret_costs_megabytes_not_a_gigabyte() {
    // Every byte value occurs, so each state's row would be 256 entries wide.
    let secret: Vec<u8> = (0..(1usize << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 7) as u8)
        .collect();
    let automaton = crate::trace::automaton::Automaton::new(&[(
        secret.clone(),
        crate::trace::automaton::PatternKind::Secret,
    )])
    .unwrap();
    let bytes = automaton.table_bytes();
    eprintln!("a 1 MiB secret: automaton tables {} MiB", bytes >> 20);
    assert!(bytes < 32 << 20, "{} MiB", bytes >> 20);
    let mut text = b"before ".to_vec();
    text.extend_from_slice(&secret);
    text.extend_from_slice(b" after");
    let chunks = chunked(&text, &[3, 4096, 500_000, 1_000_000]);
    let refs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
    let mut m = Masker::new(&[&secret], &[] as &[&[u8]]);
    assert_eq!(mask_all(&mut m, &refs), b"before [MASKED] after");
}
