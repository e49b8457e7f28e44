package main

import (
	"strconv"
	"strings"
)

// The list and sorted-set models keep a state as one string, a sequence of strings each
// written as its length in decimal, ':' and its bytes ("3:abc0:" is ["abc", ""]): equal
// sequences have equal encodings, so states compare with == and hash as the string.

// encodeString is one element's encoding.
func encodeString(s string) string {
	return strconv.Itoa(len(s)) + ":" + s
}

// encodeStrings is a sequence's encoding.
func encodeStrings(elems []string) string {
	var b strings.Builder
	for _, e := range elems {
		b.WriteString(encodeString(e))
	}
	return b.String()
}

// splitHead returns the first element of a non-empty encoding and the encoding of the rest.
func splitHead(enc string) (string, string) {
	colon := strings.IndexByte(enc, ':')
	if colon < 0 {
		panic("a model state's encoding is damaged: " + strconv.Quote(enc))
	}
	n, err := strconv.Atoi(enc[:colon])
	if err != nil || n < 0 || colon+1+n > len(enc) {
		panic("a model state's encoding is damaged: " + strconv.Quote(enc))
	}
	return enc[colon+1 : colon+1+n], enc[colon+1+n:]
}

// decodeStrings is the sequence an encoding holds.
func decodeStrings(enc string) []string {
	var out []string
	for enc != "" {
		var e string
		e, enc = splitHead(enc)
		out = append(out, e)
	}
	return out
}
