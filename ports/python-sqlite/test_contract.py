"""Tests of the port's pure functions: RFC 8785 on the RFC author's vectors,
byte for byte, and the fingerprint and event payloads on values Go computed.

    python3 -m unittest discover -s ports/python-sqlite -p 'test_*.py'

(The Go test TestPythonCanonicalMatchesGo in storeproto/cmdtest also
compares this canonicalizer with Go's on thousands of generated texts.)
"""

import os
import struct
import unittest

import contract
import jcs

HERE = os.path.dirname(os.path.abspath(__file__))
VECTORS = os.path.join(HERE, "..", "..", "spec", "testdata", "rfc8785")


class RFC8785Vectors(unittest.TestCase):
    def test_inputs_canonicalize_to_outputs(self):
        names = sorted(os.listdir(os.path.join(VECTORS, "input")))
        self.assertGreater(len(names), 0, "no vectors under %s" % VECTORS)
        for name in names:
            with self.subTest(name=name):
                with open(os.path.join(VECTORS, "input", name), "rb") as f:
                    got = jcs.canonicalize(f.read())
                with open(os.path.join(VECTORS, "output", name), "rb") as f:
                    want = f.read()
                self.assertEqual(got, want)

    def test_numbers(self):
        with open(os.path.join(VECTORS, "numbers.csv")) as f:
            rows = [line.strip().split(",") for line in f if line.strip()]
        self.assertGreater(len(rows), 0)
        for bits, want in rows:
            with self.subTest(bits=bits):
                f = struct.unpack(">d", bytes.fromhex(bits.rjust(16, "0")))[0]
                self.assertEqual(jcs.number_to_json(f), want)
                # And through the parser, spelled another way.
                self.assertEqual(jcs.canonicalize(("[" + want.upper() + "]").encode()), ("[" + want + "]").encode())


class Refusals(unittest.TestCase):
    def test_invalid_texts(self):
        for text in [b"", b"{", b'{"a":1} x', b'{"a":1,"a":2}', b'{"a":1,"\\u0061":2}', b'{"a":"\xff"}',
                     b'{"a":"\\ud800"}', b'["\\udc00"]', b"[1e400]", b"[NaN]", b"[1,]", b"[01]", b"[1.]",
                     b"[+1]", b'"\x01"', b"[true false]", b"\xef\xbb\xbf{}", b"[" * 10001 + b"]" * 10001]:
            with self.subTest(text=text[:40]):
                with self.assertRaises(contract.ContractError) as cm:
                    contract.canonicalize(text)
                self.assertEqual(cm.exception.code, "invalid_argument")

    def test_deep_nesting_at_the_limit(self):
        self.assertEqual(jcs.canonicalize(b"[" * 10000 + b"]" * 10000), b"[" * 10000 + b"]" * 10000)


class Fingerprint(unittest.TestCase):
    def test_matches_go(self):
        # spec.Fingerprint(FingerprintInput{Tenant: "acme", Operation: "work",
        # SchemaVersion: 1, MaxAttempts: 3, TimeoutMs: 3600000, Payload: `{"n":1}`})
        payload = contract.canonicalize(b'{ "n" : 1.0 }')
        self.assertEqual(payload, '{"n":1}')
        self.assertEqual(contract.fingerprint("acme", "work", 1, 3, 3600000, payload),
                         "fp1:" + __import__("hashlib").sha256(
                             b'{"max_attempts":3,"operation":"work","payload":{"n":1},"schema_version":1,'
                             b'"tenant":"acme","timeout_ms":3600000}').hexdigest())

    def test_event_payloads(self):
        self.assertEqual(contract.queued_payload("", "", 0), "{}")
        self.assertEqual(contract.queued_payload("r1", "ops<&>", 2), '{"actor":"ops\\u003c\\u0026\\u003e","replay_depth":2,"replay_of":"r1"}')
        self.assertEqual(contract.completed_payload(3), '{"generation":3}')
        self.assertEqual(contract.failed_payload("boom", 2), '{"error_code":"boom","generation":2}')
        self.assertEqual(contract.cancelled_payload("cancelled", 0), '{"generation":0,"reason":"cancelled"}')


if __name__ == "__main__":
    unittest.main()
