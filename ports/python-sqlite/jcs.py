"""RFC 8785 (JSON Canonicalization Scheme) for the leasehold contract.

canonicalize(text) returns the canonical form of a JSON text as bytes, or
raises JCSError. It accepts and rejects exactly what leasehold's Go stores
accept and reject (spec.Canonicalize, on github.com/gowebpki/jcs v1.0.2), so
that a payload is stored, hashed and refused alike in every language:

- whitespace is space, tab, LF and CR only; outside strings every byte must
  be ASCII;
- a literal or number is the bytes up to the next ',', ']', '}' or
  whitespace, and must be true, false, null or an RFC 8259 number;
- numbers are IEEE-754 doubles (out of range is an error; underflow is 0)
  written as ECMAScript 6 writes them;
- strings: no raw control characters, only the JSON escapes, \\u escapes of
  surrogates only as a high-low pair;
- object members sorted by the UTF-16 code units of their names; a
  duplicate name (also when spelled with escapes) is an error;
- nesting deeper than 10000 arrays or objects is an error.

Python's json module is not RFC 8785 (it accepts NaN, keeps lone
surrogates, sorts by code point and writes numbers its own way), so this is
a parser of its own, iterative so that no depth can exhaust the stack.
"""

import decimal
import re

MAX_DEPTH = 10000

_WS = b" \t\n\r"
_TERMINATORS = b",]}" + _WS
_NUMBER = re.compile(rb"-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?\Z")
_ESCAPES = {ord('"'): b'"', ord("\\"): b"\\", ord("/"): b"/", ord("b"): b"\b", ord("f"): b"\f",
            ord("n"): b"\n", ord("r"): b"\r", ord("t"): b"\t"}
_HEX = b"0123456789abcdefABCDEF"


class JCSError(ValueError):
    """The text is not JSON that RFC 8785 can canonicalize."""


def number_to_json(f):
    """The ECMAScript 6 form of a finite double, as RFC 8785 §3.2.2.3 writes it."""
    if f != f or f in (float("inf"), float("-inf")):
        raise JCSError("invalid JSON number: not finite")
    if f == 0:
        return "0"  # -0 too
    sign = ""
    if f < 0:
        sign, f = "-", -f
    # repr is the shortest decimal that reads back as f (David Gay's
    # algorithm, as ES6 requires); Decimal splits it into digits and an
    # exponent: f = int(digits) * 10**exp.
    t = decimal.Decimal(repr(f)).normalize().as_tuple()
    digits = "".join(map(str, t.digits))
    exp = t.exponent
    k = len(digits)
    if 1e-6 <= f < 1e21:
        if exp >= 0:
            out = digits + "0" * exp
        elif k + exp > 0:
            out = digits[: k + exp] + "." + digits[k + exp:]
        else:
            out = "0." + "0" * (-(k + exp)) + digits
    else:
        e = k - 1 + exp
        mantissa = digits[0] + ("." + digits[1:] if k > 1 else "")
        out = mantissa + "e" + ("+" if e >= 0 else "-") + str(abs(e))
    return sign + out


def _quote(raw):
    """A string's canonical text from its UTF-8 bytes."""
    out = bytearray(b'"')
    for c in raw:
        if c == 0x22:
            out += b'\\"'
        elif c == 0x5C:
            out += b"\\\\"
        elif c == 0x08:
            out += b"\\b"
        elif c == 0x0C:
            out += b"\\f"
        elif c == 0x0A:
            out += b"\\n"
        elif c == 0x0D:
            out += b"\\r"
        elif c == 0x09:
            out += b"\\t"
        elif c < 0x20:
            out += b"\\u%04x" % c
        else:
            out.append(c)
    out += b'"'
    return bytes(out)


def _literal(token):
    if token in (b"true", b"false", b"null"):
        return token
    if not _NUMBER.match(token):
        raise JCSError("invalid literal or number: %r" % token[:32])
    f = float(token)
    if f in (float("inf"), float("-inf")):
        raise JCSError("number out of range: %r" % token[:32])
    return number_to_json(f).encode()


class _Parser:
    def __init__(self, data):
        self.d = data
        self.i = 0

    def next_char(self):
        if self.i >= len(self.d):
            raise JCSError("unexpected end of input")
        c = self.d[self.i]
        if c > 0x7F:
            raise JCSError("unexpected non-ASCII byte outside a string")
        self.i += 1
        return c

    def scan(self):
        while True:
            c = self.next_char()
            if c not in _WS:
                return c

    def peek(self):
        c = self.scan()
        self.i -= 1
        return c

    def expect(self, want):
        c = self.scan()
        if c != want:
            raise JCSError("expected %r, got %r" % (chr(want), chr(c)))

    def u_escape(self):
        h = bytes(self.next_char() for _ in range(4))
        if any(c not in _HEX for c in h):
            raise JCSError("invalid \\u escape %r" % h)
        return int(h, 16)

    def string(self):
        """The UTF-8 bytes of a string whose opening quote was read."""
        out = bytearray()
        d = self.d
        while True:
            if self.i >= len(d):
                raise JCSError("unexpected end of input in a string")
            c = d[self.i]
            self.i += 1
            if c == 0x22:
                return bytes(out)
            if c < 0x20:
                raise JCSError("unescaped control character in a string")
            if c == 0x5C:
                e = self.next_char()
                if e == ord("u"):
                    u = self.u_escape()
                    if 0xD800 <= u <= 0xDFFF:
                        if u > 0xDBFF:
                            raise JCSError("invalid high surrogate \\u%04x" % u)
                        if self.next_char() != 0x5C or self.next_char() != ord("u"):
                            raise JCSError("missing low surrogate")
                        lo = self.u_escape()
                        if not 0xDC00 <= lo <= 0xDFFF:
                            raise JCSError("invalid low surrogate \\u%04x" % lo)
                        u = 0x10000 + ((u - 0xD800) << 10) + (lo - 0xDC00)
                    out += chr(u).encode("utf-8")
                elif e in _ESCAPES:
                    out += _ESCAPES[e]
                else:
                    raise JCSError("unexpected escape \\%s" % chr(e))
            else:
                # ASCII, or a byte of a UTF-8 sequence (the whole text was
                # checked to be valid UTF-8 before parsing).
                out.append(c)

    def simple(self):
        start = self.i
        d = self.d
        while self.i < len(d):
            c = d[self.i]
            if c in _TERMINATORS:
                break
            if c > 0x7F:
                raise JCSError("unexpected non-ASCII byte outside a string")
            self.i += 1
        token = d[start:self.i]
        if not token:
            raise JCSError("missing value")
        return _literal(token)

    def parse(self):
        """The canonical bytes of one JSON value (and what follows it is
        left to the caller)."""
        # Each frame is a container being filled: [kind, items, expecting a
        # separator, pending member name]. Values bubble up as canonical
        # bytes; object members are sorted when their object closes.
        stack = []
        value = None
        while True:
            if value is None:
                # Parse a value.
                c = self.scan()
                if c == ord("{") or c == ord("["):
                    if len(stack) >= MAX_DEPTH:
                        raise JCSError("maximum nesting depth of %d exceeded" % MAX_DEPTH)
                    stack.append(["o" if c == ord("{") else "a", [], False, None])
                elif c == 0x22:
                    value = _quote(self.string())
                else:
                    self.i -= 1
                    value = self.simple()
                if value is None:
                    # A container opened: look for its first item or its end.
                    value = self.container_step(stack)
                    if value is None:
                        continue
            # A value is complete: give it to the container it belongs to.
            if not stack:
                return value
            frame = stack[-1]
            if frame[0] == "a":
                frame[1].append(value)
            else:
                frame[1].append((frame[3], value))
            frame[2] = True
            value = self.container_step(stack)

    def container_step(self, stack):
        """After a container opened or took an item: close it (returning
        its canonical bytes) or position the parser at its next value
        (returning None)."""
        frame = stack[-1]
        kind, items, more = frame[0], frame[1], frame[2]
        close = ord("}") if kind == "o" else ord("]")
        c = self.peek()
        if c == close:
            self.i += 1
            stack.pop()
            if kind == "a":
                return b"[" + b",".join(items) + b"]"
            items.sort(key=lambda m: m[0][1])
            for a, b in zip(items, items[1:]):
                if a[0][1] == b[0][1]:
                    raise JCSError("duplicate key %r" % a[0][0][:32])
            return b"{" + b",".join(_quote(name) + b":" + v for (name, _), v in items) + b"}"
        if more:
            self.expect(ord(","))
        if kind == "o":
            self.expect(0x22)
            name = self.string()
            self.expect(ord(":"))
            frame[3] = (name, name.decode("utf-8").encode("utf-16-be"))
        return None


def canonicalize(text):
    """The RFC 8785 canonical form of text (bytes, valid UTF-8)."""
    p = _Parser(text)
    out = p.parse()
    for c in text[p.i:]:
        if c not in _WS:
            raise JCSError("data after the JSON value")
    return out
