//! The pages of a PDF a request sends inline. Providers bill a PDF by the
//! page (its extracted text and an image of each page), which its base64
//! text does not bound: a compact PDF bills several times the tokens of its
//! base64. So a PDF is held at its pages, counted from its page objects
//! (`/Type /Page`) and its page tree's `/Count`, in the file and inside its
//! compressed object streams; one whose pages cannot be counted (encrypted,
//! malformed, an inflation bomb) is held at the most pages a provider reads.

use std::io::Read;

use base64::Engine;
use flate2::read::ZlibDecoder;
use serde_json::Value;

/// The most pages a provider reads of one PDF (Anthropic's and OpenAI's limit).
pub const MAX_PAGES: u64 = 100;
/// The most text tokens a provider bills for one page's extracted text.
pub const PAGE_TEXT_TOKENS: u64 = 3_000;
/// Inflated bytes read from one PDF's object streams at most.
const MAX_INFLATED: u64 = 64 * 1024 * 1024;

/// The pages to hold for a content part that carries a PDF inline (an
/// Anthropic `document` with a base64 source, an OpenAI `file` or
/// `input_file` with `file_data`); `None`: the part carries no inline PDF.
pub fn pages_of_part(part: &Value) -> Option<u64> {
    let data = inline_pdf(part)?;
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(data.trim()) else {
        return Some(MAX_PAGES);
    };
    Some(pages(&bytes).map_or(MAX_PAGES, |n| n.min(MAX_PAGES)))
}

/// The base64 of the PDF a part carries inline.
fn inline_pdf(part: &Value) -> Option<&str> {
    let source = &part["source"];
    if source["type"] == "base64" && source["media_type"] == "application/pdf" {
        return source["data"].as_str();
    }
    let data = part["file"]["file_data"]
        .as_str()
        .or_else(|| part["file_data"].as_str())?;
    let (head, payload) = data.split_once(',')?;
    (head.starts_with("data:application/pdf") && head.ends_with(";base64")).then_some(payload)
}

/// The pages a PDF's bytes name; `None`: none could be found.
pub fn pages(pdf: &[u8]) -> Option<u64> {
    let mut found = scan(pdf);
    let mut budget = MAX_INFLATED;
    for stream in object_streams(pdf)? {
        let mut inflated = Vec::new();
        let read = ZlibDecoder::new(stream)
            .take(budget.saturating_add(1))
            .read_to_end(&mut inflated);
        if read.is_err() || inflated.len() as u64 > budget {
            return None;
        }
        budget -= inflated.len() as u64;
        found = found.max(scan(&inflated));
    }
    (found > 0).then_some(found)
}

/// The larger of the page objects and the page trees' `/Count` in `bytes`.
fn scan(bytes: &[u8]) -> u64 {
    // `/Ty#70e /P#61ge` is `/Type /Page` to a PDF reader: read it so too.
    let decoded;
    let bytes = if bytes.contains(&b'#') {
        decoded = decode_names(bytes);
        &decoded[..]
    } else {
        bytes
    };
    let mut page_objects = 0;
    let mut most_counted = 0;
    let mut at = 0;
    while let Some(found) = find(&bytes[at..], b"/Type") {
        at += found + b"/Type".len();
        if name(skip_space(&bytes[at..])).as_deref() == Some(&b"Page"[..]) {
            page_objects += 1;
        }
    }
    at = 0;
    while let Some(found) = find(&bytes[at..], b"/Count") {
        at += found + b"/Count".len();
        let digits: Vec<u8> = skip_space(&bytes[at..])
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .copied()
            .collect();
        let count = std::str::from_utf8(&digits)
            .ok()
            .and_then(|d| d.parse::<u64>().ok())
            .unwrap_or(0);
        most_counted = most_counted.max(count);
    }
    page_objects.max(most_counted)
}

/// The data of each compressed object stream (`/Type /ObjStm`): where page
/// objects hide in PDFs since 1.5. `None` where one is compressed other than
/// by `/FlateDecode` alone (pages hidden there could not be counted).
fn object_streams(pdf: &[u8]) -> Option<Vec<&[u8]>> {
    let mut streams = Vec::new();
    let mut at = 0;
    while let Some(found) = find(&pdf[at..], b"/ObjStm") {
        let dict_at = at + found;
        at = dict_at + b"/ObjStm".len();
        let start = find(&pdf[at..], b"stream")?;
        // The stream's dictionary, from its `<<`: its filter may come first.
        let dict_start = rfind(&pdf[..dict_at], b"<<").unwrap_or(dict_at);
        let header = &pdf[dict_start..at + start];
        let mut data_at = at + start + b"stream".len();
        if pdf.get(data_at) == Some(&b'\r') {
            data_at += 1;
        }
        if pdf.get(data_at) == Some(&b'\n') {
            data_at += 1;
        }
        let end = find(&pdf[data_at..], b"endstream")?;
        if !flate_only(header) {
            return None;
        }
        streams.push(&pdf[data_at..data_at + end]);
        at = data_at + end;
    }
    Some(streams)
}

/// Whether a stream's only filter is `/FlateDecode`.
fn flate_only(header: &[u8]) -> bool {
    let filters = [
        &b"/ASCIIHexDecode"[..],
        b"/ASCII85Decode",
        b"/LZWDecode",
        b"/RunLengthDecode",
        b"/Crypt",
        b"/AHx",
        b"/A85",
        b"/LZW",
        b"/RL",
        b"/Fl ",
    ];
    find(header, b"/FlateDecode").is_some() && !filters.iter().any(|f| find(header, f).is_some())
}

/// `bytes` with every name's `#xx` escapes decoded.
fn decode_names(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'/' {
            let name = name(&bytes[i..]).unwrap_or_default();
            let raw = 1 + bytes[i + 1..]
                .iter()
                .position(|b| b.is_ascii_whitespace() || b"/<>[]()%{}".contains(b))
                .unwrap_or(bytes.len() - i - 1);
            out.push(b'/');
            out.extend(name);
            i += raw;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    out
}

/// The PDF name at the start of `bytes` (`/Page`), its `#xx` escapes
/// decoded as a PDF reader decodes them; `None` if no name starts there.
fn name(bytes: &[u8]) -> Option<Vec<u8>> {
    let rest = bytes.strip_prefix(b"/")?;
    let end = rest
        .iter()
        .position(|b| b.is_ascii_whitespace() || b"/<>[]()%{}".contains(b))
        .unwrap_or(rest.len());
    let mut decoded = Vec::with_capacity(end);
    let mut i = 0;
    while i < end {
        let hex = rest
            .get(i + 1..i + 3)
            .and_then(|h| std::str::from_utf8(h).ok());
        match (rest[i], hex.and_then(|h| u8::from_str_radix(h, 16).ok())) {
            (b'#', Some(byte)) if i + 2 < end => {
                decoded.push(byte);
                i += 3;
            }
            (byte, _) => {
                decoded.push(byte);
                i += 1;
            }
        }
    }
    Some(decoded)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

fn rfind(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).rposition(|w| w == needle)
}

fn skip_space(bytes: &[u8]) -> &[u8] {
    let n = bytes.iter().take_while(|b| b.is_ascii_whitespace()).count();
    &bytes[n..]
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use flate2::Compression;
    use flate2::write::ZlibEncoder;
    use serde_json::json;

    use super::*;

    fn plain_pdf(pages: usize) -> Vec<u8> {
        let mut pdf = b"%PDF-1.4\n1 0 obj << /Type /Catalog /Pages 2 0 R >> endobj\n".to_vec();
        pdf.extend(format!("2 0 obj << /Type /Pages /Count {pages} >> endobj\n").bytes());
        for i in 0..pages {
            pdf.extend(format!("{} 0 obj << /Type /Page /Parent 2 0 R >> endobj\n", i + 3).bytes());
        }
        pdf.extend(b"%%EOF\n");
        pdf
    }

    /// Page objects only inside a compressed object stream, as PDF 1.5+ writes them.
    fn compressed_pdf(pages: usize) -> Vec<u8> {
        let mut objects = String::from("<< /Type /Pages /Kids [] >>\n");
        for _ in 0..pages {
            objects.push_str("<</Type/Page/Parent 2 0 R>>\n");
        }
        let mut encoder = ZlibEncoder::new(Vec::new(), Compression::default());
        encoder.write_all(objects.as_bytes()).unwrap();
        let data = encoder.finish().unwrap();
        let mut pdf =
            b"%PDF-1.7\n5 0 obj\n<< /Filter /FlateDecode /Type /ObjStm /N 3 >>\nstream\n".to_vec();
        pdf.extend(&data);
        pdf.extend(b"\nendstream\nendobj\n%%EOF\n");
        pdf
    }

    #[test]
    fn pages_are_counted_in_the_file_and_in_its_object_streams() {
        assert_eq!(pages(&plain_pdf(7)), Some(7));
        assert_eq!(pages(&compressed_pdf(12)), Some(12));
        // The page tree's own word, where it names more pages than are seen.
        assert_eq!(pages(b"<< /Type /Pages /Count 40 >>"), Some(40));
        assert_eq!(pages(b"not a pdf"), None);
    }

    /// What a caller might send to be held at fewer pages than it is billed.
    #[test]
    fn pages_hidden_from_the_count_make_it_unknown_or_are_found() {
        // A page tree that says 1 while 9 page objects say otherwise.
        let mut lying = plain_pdf(9);
        lying.extend(b"<< /Type /Pages /Count 1 >>");
        assert_eq!(pages(&lying), Some(9));
        // Names escaped as a PDF reader reads them.
        assert_eq!(pages(b"<< /Type /#50age >> << /Type/Pa#67e >>"), Some(2));
        assert_eq!(pages(b"<< /Ty#70e /Page >> << /#43ount 30 >>"), Some(30));
        assert_eq!(pages(b"<< /Type /Pages >> << /Type /PageLabel >>"), None);
        // Page objects in an object stream under a filter this count cannot read.
        let hidden =
            b"<< /Type /ObjStm /N 5 /Filter /LZWDecode >>\nstream\nxxxx\nendstream\n<< /Type /Page >>";
        assert_eq!(pages(hidden), None);
        let chained =
            b"<< /Type /ObjStm /Filter [/ASCII85Decode /FlateDecode] >>\nstream\nxx\nendstream";
        assert_eq!(pages(chained), None);
    }

    #[test]
    fn inline_pdfs_of_every_door_are_found_and_the_unreadable_held_at_the_most() {
        let b64 = base64::engine::general_purpose::STANDARD.encode(plain_pdf(3));
        let anthropic = json!({"type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": b64}});
        let chat = json!({"type": "file",
            "file": {"filename": "a.pdf", "file_data": format!("data:application/pdf;base64,{b64}")}});
        let responses = json!({"type": "input_file",
            "file_data": format!("data:application/pdf;base64,{b64}")});
        for part in [&anthropic, &chat, &responses] {
            assert_eq!(pages_of_part(part), Some(3), "{part}");
        }
        let garbled = json!({"type": "document",
            "source": {"type": "base64", "media_type": "application/pdf", "data": "%%%"}});
        assert_eq!(pages_of_part(&garbled), Some(MAX_PAGES));
        let text = json!({"type": "document", "source": {"type": "text", "data": "hello"}});
        assert_eq!(pages_of_part(&text), None);
    }
}
