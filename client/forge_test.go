package client_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
)

// forgedV1 is a v1 signature under the empty key: what anyone can make.
func forgedV1(ts int64, body []byte) string {
	h := hmac.New(sha256.New, nil)
	t := strconv.FormatInt(ts, 10)
	h.Write([]byte(t + "."))
	h.Write(body)
	return "t=" + t + ",v1=" + hex.EncodeToString(h.Sum(nil))
}
