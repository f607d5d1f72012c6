// A connection gets a serving thread once its request is there to read:
// its head whole and its body come, judged from the bytes the socket holds.
#include "server/http/request_arrival.h"

#include <string>

#include "gtest/gtest.h"

namespace tensormorph {
namespace {

TEST(RequestArrivalTest, AHeadIsReadyAtItsBlankLine) {
  EXPECT_EQ(RequestArrival(""), Arrival::kIncomplete);
  EXPECT_EQ(RequestArrival("GET / HTTP/1.1\r\nHost: x\r\n"),
            Arrival::kIncomplete);
  EXPECT_EQ(RequestArrival("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
            Arrival::kReady);
}

TEST(RequestArrivalTest, ABodyIsWaitedForToItsLength) {
  const std::string head =
      "POST /v1/GetServerInfo HTTP/1.1\r\ncontent-length: 5\r\n\r\n";
  EXPECT_EQ(RequestArrival(head + "{}"), Arrival::kIncomplete);
  EXPECT_EQ(RequestArrival(head + "{   }"), Arrival::kReady);
  // A client that asks to be told to go on sends no body until it is.
  EXPECT_EQ(RequestArrival("POST / HTTP/1.1\r\nContent-Length: 5\r\n"
                           "Expect: 100-continue\r\n\r\n"),
            Arrival::kReady);
  // A length that is no number is the serving thread's to refuse.
  EXPECT_EQ(RequestArrival("POST / HTTP/1.1\r\nContent-Length: x\r\n\r\n"),
            Arrival::kReady);
}

TEST(RequestArrivalTest, AChunkedBodyIsWaitedForToItsLastChunk) {
  const std::string head =
      "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
  EXPECT_EQ(RequestArrival(head + "2\r\n{}\r\n"), Arrival::kIncomplete);
  EXPECT_EQ(RequestArrival(head + "2\r\n{}\r\n0\r\n\r\n"), Arrival::kReady);
  // A last chunk with an extension, or trailers after it.
  EXPECT_EQ(RequestArrival(head + "2\r\n{}\r\n0;x=1\r\n\r\n"), Arrival::kReady);
  EXPECT_EQ(RequestArrival(head + "2\r\n{}\r\n0\r\nX-T: 1\r\n\r\n"),
            Arrival::kReady);
}

TEST(RequestArrivalTest, WhatFillsTheBytesLookedAtIsReady) {
  // A long body is handed on once its first bytes fill what is looked at:
  // a client that sends it a byte a second never gets that far.
  const std::string head = "POST / HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n";
  EXPECT_EQ(RequestArrival(head + "x"), Arrival::kIncomplete);
  std::string full = head;
  full.resize(kArrivalPeekBytes, 'x');
  EXPECT_EQ(RequestArrival(full), Arrival::kReady);
  // So is a head longer than that (cpp-httplib refuses it).
  EXPECT_EQ(RequestArrival(std::string(kArrivalPeekBytes, 'h')),
            Arrival::kReady);
}

TEST(RequestArrivalTest, ATlsHandshakeIsWaitedForToItsFirstRecord) {
  // A handshake record announcing 6 bytes.
  const std::string header("\x16\x03\x01\x00\x06", 5);
  EXPECT_EQ(TlsHelloArrival(""), Arrival::kIncomplete);
  EXPECT_EQ(TlsHelloArrival(header.substr(0, 3)), Arrival::kIncomplete);
  EXPECT_EQ(TlsHelloArrival(header + "abc"), Arrival::kIncomplete);
  EXPECT_EQ(TlsHelloArrival(header + "abcdef"), Arrival::kReady);
  // Bytes that are no handshake: SSL_accept refuses them at once.
  EXPECT_EQ(TlsHelloArrival("GET / HTTP/1.1\r\n"), Arrival::kReady);
}

}  // namespace
}  // namespace tensormorph
