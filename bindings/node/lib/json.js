// json.js - JavaScript values as the JSON text libleaserun (jansson) reads.
// JSON.stringify writes two things jansson refuses although they stand for
// ordinary JavaScript values: an integer out of the 64-bit range (2 ** 64
// is written 18446744073709552000), and a lone UTF-16 surrogate (a string
// cut inside an emoji), written as an escape such as \ud83d. Event loop
// only.

// A string token, or an integer literal of 19 digits or more (not the
// digits of a fraction: 1e-6 is written 0.000001).
const TOKEN = /"(?:[^"\\]|\\.)*"|(?<![\d.])-?\d{19,}(?![.eE\d])/g;
const INT64_MAX = '9223372036854775807';
// In a string token: an escaped backslash (kept), or a surrogate escape.
// JSON.stringify writes a surrogate pair as its characters, so every
// surrogate escape it writes is a lone one.
const SURROGATE = /\\(\\|ud[89a-f][0-9a-f]{2})/g;

function fits(literal) {
	const digits = literal.startsWith('-') ? literal.slice(1) : literal;
	// -2^63 is taken too, as jansson takes it; one less is harmless.
	return digits.length < 19 || (digits.length === 19 && digits <= INT64_MAX);
}

function token(t) {
	if (t.startsWith('"'))
		return t.includes('\\ud') ? t.replace(SURROGATE, (m, g) => (g === '\\' ? m : '\\ufffd')) : t;
	// A JavaScript number is a double anyway: written as one, it is the
	// same number for JSON.parse, and jansson takes it.
	return fits(t) ? t : `${t}.0`;
}

/**
 * JSON.stringify(value), made readable by jansson: an integer beyond the
 * 64-bit range is written with a fraction (the same number), a lone
 * surrogate becomes U+FFFD, as Node.js does whenever it writes a string
 * as UTF-8. undefined when JSON.stringify has no text for the value; its
 * errors (a BigInt, a cycle) are thrown as they are.
 */
export function jsonText(value) {
	const text = JSON.stringify(value);
	if (text === undefined || !(text.includes('\\ud') || /\d{19}/.test(text))) return text;
	return text.replace(TOKEN, token);
}
