// Tests for storage/s3/s3_xml.h: the example answers of the S3 API reference and answers in
// the form Ceph RGW 16 writes them (src/rgw/rgw_rest_s3.cc: compact, the S3 namespace, fields
// AWS lacks), each refusal of an untrusted answer, url-encoded keys, the two request bodies read
// back through expat, and a few hundred mutations of every valid answer that must never throw.
#include "storage/s3/s3_xml.h"

#include <expat.h>

#include <catch2/catch.hpp>
#include <cstdint>
#include <random>
#include <string>
#include <string_view>
#include <vector>

namespace shardguard::storage::s3 {
namespace {

constexpr std::string_view kDecl = R"(<?xml version="1.0" encoding="UTF-8"?>)";
constexpr std::string_view kNs = R"( xmlns="http://s3.amazonaws.com/doc/2006-03-01/")";

// ---- documents ----------------------------------------------------------------------------

// ListObjectsV2, the API reference's first example.
const std::string kAwsList = std::string(kDecl) + R"(
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
    <Name>bucket</Name>
    <Prefix/>
    <KeyCount>205</KeyCount>
    <MaxKeys>1000</MaxKeys>
    <IsTruncated>false</IsTruncated>
    <Contents>
        <Key>my-image.jpg</Key>
        <LastModified>2009-10-12T17:50:30.000Z</LastModified>
        <ETag>"fba9dede5f27731c9771645a39863328"</ETag>
        <Size>434234</Size>
        <StorageClass>STANDARD</StorageClass>
    </Contents>
    <Contents>
        <Key>my-third-image.jpg</Key>
        <LastModified>2009-10-12T17:50:30.000Z</LastModified>
        <ETag>"1b2cf535f27731c974343645a3985328"</ETag>
        <Size>64994</Size>
        <StorageClass>STANDARD_IA</StorageClass>
    </Contents>
</ListBucketResult>)";

// A truncated page with a delimiter, as in the API reference's continuation example.
const std::string kAwsListTruncated =
    R"(<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Name>bucket</Name>
  <Prefix>runs/</Prefix>
  <NextContinuationToken>1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=</NextContinuationToken>
  <KeyCount>3</KeyCount>
  <MaxKeys>3</MaxKeys>
  <Delimiter>/</Delimiter>
  <IsTruncated>true</IsTruncated>
  <Contents>
    <Key>runs/ExampleObject.txt</Key>
    <LastModified>2013-09-17T18:07:53.000Z</LastModified>
    <ETag>"599bab3ed2c697f1d26842727561fd94"</ETag>
    <Size>857</Size>
    <StorageClass>REDUCED_REDUNDANCY</StorageClass>
  </Contents>
  <CommonPrefixes>
    <Prefix>runs/photos/</Prefix>
  </CommonPrefixes>
  <CommonPrefixes>
    <Prefix>runs/videos/</Prefix>
  </CommonPrefixes>
</ListBucketResult>)";

// RGW 16 under encoding-type=url and fetch-owner: EncodingType first, the common prefixes before
// the objects, the request's Prefix not encoded, '/' kept, a space as %20, '+' as %2B, UTF-8
// bytes %-escaped, the continuation token the raw next key.
const std::string kRgwListEncoded =
    std::string(kDecl) + "<ListBucketResult" + std::string(kNs) +
    ">"
    "<EncodingType>url</EncodingType><Name>ckpt</Name>"
    "<Prefix>run a/</Prefix><MaxKeys>2</MaxKeys>"
    "<Delimiter>/</Delimiter><IsTruncated>true</IsTruncated>"
    "<CommonPrefixes><Prefix>run%20a/step%2B1/</Prefix>"
    "</CommonPrefixes>"
    "<Contents><Key>run%20a/caf%C3%A9+%E2%82%AC.bin</Key>"
    "<LastModified>2024-03-01T10:00:00.000Z</LastModified>"
    "<ETag>&quot;9b2cf535f27731c974343645a3985328&quot;</ETag>"
    "<Size>18446744073709551615</Size>"
    "<StorageClass>STANDARD</StorageClass>"
    "<Owner><ID>tester</ID><DisplayName>Tester</DisplayName></Owner>"
    "<Type>Normal</Type></Contents>"
    "<NextContinuationToken>run a/caf\xC3\xA9 \xE2\x82\xAC.bin"
    "</NextContinuationToken><KeyCount>1</KeyCount>"
    "</ListBucketResult>";

const std::string kAwsInitiate = std::string(kDecl) + R"(
<InitiateMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>example-bucket</Bucket>
  <Key>example-object</Key>
  <UploadId>VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>
</InitiateMultipartUploadResult>)";

const std::string kRgwInitiate =
    std::string(kDecl) + "<InitiateMultipartUploadResult" + std::string(kNs) +
    "><Bucket>ckpt</Bucket><Key>step-000000100/shard-0.bin</Key>"
    "<UploadId>2~nHkfzQ3Ln0AVbHTm0ESUCoCsi9r3bVz</UploadId></InitiateMultipartUploadResult>";

const std::string kAwsComplete = std::string(kDecl) + R"(
<CompleteMultipartUploadResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Location>http://Example-Bucket.s3.us-east-1.amazonaws.com/Example-Object</Location>
  <Bucket>Example-Bucket</Bucket>
  <Key>Example-Object</Key>
  <ETag>"3858f62230ac3c915f300c664312c11f-9"</ETag>
</CompleteMultipartUploadResult>)";

// RGW 16 can send the ETag empty.
const std::string kRgwComplete =
    std::string(kDecl) + "<CompleteMultipartUploadResult" + std::string(kNs) +
    "><Location>http://127.0.0.1:8000/ckpt/step-000000100/shard-0.bin</Location>"
    "<Bucket>ckpt</Bucket><Key>step-000000100/shard-0.bin</Key><ETag></ETag>"
    "</CompleteMultipartUploadResult>";

// The API reference's example of a CompleteMultipartUpload that fails after its 200 was sent.
const std::string kAwsInternalError = std::string(kDecl) + R"(
<Error>
  <Code>InternalError</Code>
  <Message>We encountered an internal error. Please try again.</Message>
  <RequestId>656c76696e6727732072657175657374</RequestId>
  <HostId>Uuag1LuByRx9e6j5Onimru9pO4ZVKnJ2Qz7/C1NPcfTWAtRPfTaOFg==</HostId>
</Error>)";

const std::string kAwsNoSuchKey = std::string(kDecl) + R"(
<Error>
  <Code>NoSuchKey</Code>
  <Message>The resource you requested does not exist</Message>
  <Resource>/mybucket/myfoto.jpg</Resource>
  <RequestId>4442587FB7D0A2F9</RequestId>
</Error>)";

// RGW: no namespace, no Message when it has none, BucketName and HostId.
const std::string kRgwNoSuchKey = std::string(kDecl) +
                                  "<Error><Code>NoSuchKey</Code><BucketName>ckpt</BucketName>"
                                  "<RequestId>tx00000a1b2c3d4e5f60000-0065f1e2d3-1234-default"
                                  "</RequestId><HostId>1234-default-default</HostId></Error>";

const std::string kAwsUploads = std::string(kDecl) + R"(
<ListMultipartUploadsResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Bucket>bucket</Bucket>
  <KeyMarker></KeyMarker>
  <UploadIdMarker></UploadIdMarker>
  <NextKeyMarker>my-movie.m2ts</NextKeyMarker>
  <NextUploadIdMarker>YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ</NextUploadIdMarker>
  <MaxUploads>3</MaxUploads>
  <IsTruncated>true</IsTruncated>
  <Upload>
    <Key>my-divisor</Key>
    <UploadId>XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw</UploadId>
    <Initiator>
      <ID>arn:aws:iam::111122223333:user/user1-11111a31-17b5-4fb7-9df5-b111111f13de</ID>
      <DisplayName>user1-11111a31-17b5-4fb7-9df5-b111111f13de</DisplayName>
    </Initiator>
    <Owner>
      <ID>75aa57f09aa0c8caeab4f8c24e99d10f8e7faeebf76c078efc7c6caea54ba06a</ID>
      <DisplayName>OwnerDisplayName</DisplayName>
    </Owner>
    <StorageClass>STANDARD</StorageClass>
    <Initiated>2010-11-10T20:48:33.000Z</Initiated>
  </Upload>
  <Upload>
    <Key>my-movie.m2ts</Key>
    <UploadId>VXBsb2FkIElEIGZvciBlbHZpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA</UploadId>
    <StorageClass>STANDARD</StorageClass>
    <Initiated>2010-11-10T20:48:33.000Z</Initiated>
  </Upload>
</ListMultipartUploadsResult>)";

// RGW 16 under encoding-type=url: the upload keys encoded without an EncodingType element, the
// NextKeyMarker raw.
const std::string kRgwUploadsEncoded =
    std::string(kDecl) + "<ListMultipartUploadsResult" + std::string(kNs) +
    "><Bucket>ckpt</Bucket><NextKeyMarker>a+b c</NextKeyMarker>"
    "<NextUploadIdMarker>2~xyz</NextUploadIdMarker><MaxUploads>1</MaxUploads>"
    "<IsTruncated>true</IsTruncated>"
    "<Upload><Key>a%2Bb%20c</Key><UploadId>2~xyz</UploadId>"
    "<Initiator><ID>tester</ID><DisplayName>Tester</DisplayName></Initiator>"
    "<Owner><ID>tester</ID><DisplayName>Tester</DisplayName></Owner>"
    "<StorageClass>STANDARD</StorageClass><Initiated>2024-03-01T10:00:00.000Z</Initiated>"
    "</Upload></ListMultipartUploadsResult>";

const std::string kAwsDelete = std::string(kDecl) + R"(
<DeleteResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">
  <Deleted>
    <Key>sample1.txt</Key>
  </Deleted>
  <Error>
    <Key>sample2.txt</Key>
    <Code>AccessDenied</Code>
    <Message>Access Denied</Message>
  </Error>
</DeleteResult>)";

// RGW: VersionId beside the key; the Code of older releases was the HTTP status.
const std::string kRgwDelete = std::string(kDecl) + "<DeleteResult" + std::string(kNs) +
                               "><Deleted><Key>step-000000100/a.bin</Key></Deleted>"
                               "<Error><Key>step-000000100/b.bin</Key><VersionId></VersionId>"
                               "<Code>403</Code><Message>AccessDenied</Message></Error>"
                               "</DeleteResult>";

// ---- helpers ------------------------------------------------------------------------------

template <typename T>
std::string message_of(const Result<T>& r) {
  return r.ok() ? std::string("(ok)") : r.error().message();
}

template <typename T>
void require_refused(const Result<T>& r, ErrorCode code, std::string_view needle) {
  INFO(message_of(r));
  REQUIRE_FALSE(r.ok());
  CHECK(r.error().code() == code);
  CHECK(r.error().message().find(needle) != std::string::npos);
}

std::string list_with(std::string_view body) {
  return "<ListBucketResult>" + std::string(body) + "</ListBucketResult>";
}

std::string one_object(std::string_view fields) {
  return list_with("<IsTruncated>false</IsTruncated><Contents>" + std::string(fields) +
                   "</Contents>");
}

// The text of every `element` in `xml`, read with expat on its own (not the code under test).
std::vector<std::string> texts_of(std::string_view xml, std::string_view element) {
  struct State {
    std::string_view element;
    bool inside = false;
    std::string text;
    std::vector<std::string> out;
  } state;
  state.element = element;
  XML_Parser p = XML_ParserCreate(nullptr);
  XML_SetUserData(p, &state);
  XML_SetElementHandler(
      p,
      [](void* u, const XML_Char* name, const XML_Char**) {
        auto* s = static_cast<State*>(u);
        if (s->element == name) s->inside = true, s->text.clear();
      },
      [](void* u, const XML_Char* name) {
        auto* s = static_cast<State*>(u);
        if (s->element == name) s->inside = false, s->out.push_back(s->text);
      });
  XML_SetCharacterDataHandler(p, [](void* u, const XML_Char* d, int n) {
    auto* s = static_cast<State*>(u);
    if (s->inside) s->text.append(d, static_cast<size_t>(n));
  });
  const bool ok = XML_Parse(p, xml.data(), static_cast<int>(xml.size()), XML_TRUE) == XML_STATUS_OK;
  XML_ParserFree(p);
  REQUIRE(ok);
  return state.out;
}

// ---- error documents ----------------------------------------------------------------------

TEST_CASE("parse_error reads AWS's and RGW's error documents", "[s3_xml]") {
  auto aws = parse_error(kAwsNoSuchKey);
  REQUIRE(aws.ok());
  CHECK(aws->code == "NoSuchKey");
  CHECK(aws->message == "The resource you requested does not exist");
  CHECK(aws->resource == "/mybucket/myfoto.jpg");
  CHECK(aws->request_id == "4442587FB7D0A2F9");

  auto rgw = parse_error(kRgwNoSuchKey);
  REQUIRE(rgw.ok());
  CHECK(rgw->code == "NoSuchKey");
  CHECK(rgw->message.empty());
  CHECK(rgw->request_id == "tx00000a1b2c3d4e5f60000-0065f1e2d3-1234-default");

  require_refused(parse_error(kAwsDelete), ErrorCode::kCorrupt,
                  "root element <DeleteResult>, expected <Error>");
  require_refused(parse_error("<html><body>502 Bad Gateway</body></html>"), ErrorCode::kCorrupt,
                  "root element <html>");
}

// ---- ListObjectsV2 ------------------------------------------------------------------------

TEST_CASE("ListObjectsV2: the API reference's example", "[s3_xml]") {
  auto r = parse_list_objects_v2(kAwsList, false);
  INFO(message_of(r));
  REQUIRE(r.ok());
  CHECK_FALSE(r->is_truncated);
  CHECK(r->next_continuation_token.empty());
  REQUIRE(r->contents.size() == 2);
  CHECK(r->contents[0].key == "my-image.jpg");
  CHECK(r->contents[0].size == 434234);
  CHECK(r->contents[0].etag == "fba9dede5f27731c9771645a39863328");
  CHECK(r->contents[0].last_modified == "2009-10-12T17:50:30.000Z");
  CHECK(r->contents[1].key == "my-third-image.jpg");
  CHECK(r->contents[1].size == 64994);
  CHECK(r->common_prefixes.empty());
}

TEST_CASE("ListObjectsV2: a truncated page carries its continuation token", "[s3_xml]") {
  auto r = parse_list_objects_v2(kAwsListTruncated, false);
  INFO(message_of(r));
  REQUIRE(r.ok());
  CHECK(r->is_truncated);
  CHECK(r->next_continuation_token == "1ueGcxLPRx1Tr/XYExHnhbYLgveDs2J/wm36Hy4vbOwM=");
  REQUIRE(r->contents.size() == 1);
  CHECK(r->contents[0].key == "runs/ExampleObject.txt");
  CHECK(r->common_prefixes == std::vector<std::string>{"runs/photos/", "runs/videos/"});

  SECTION("truncated without a token would loop or stop early: refused") {
    require_refused(parse_list_objects_v2(list_with("<IsTruncated>true</IsTruncated>"), false),
                    ErrorCode::kCorrupt, "<IsTruncated> is true without <NextContinuationToken>");
  }
  SECTION("no IsTruncated at all: refused") {
    require_refused(parse_list_objects_v2(list_with(""), false), ErrorCode::kCorrupt,
                    "no <IsTruncated>");
  }
  SECTION("IsTruncated other than true/false: refused") {
    require_refused(parse_list_objects_v2(list_with("<IsTruncated>yes</IsTruncated>"), false),
                    ErrorCode::kCorrupt, "<IsTruncated> 'yes' is neither 'true' nor 'false'");
  }
}

TEST_CASE("ListObjectsV2: RGW's url-encoded answer is decoded", "[s3_xml]") {
  auto r = parse_list_objects_v2(kRgwListEncoded, true);
  INFO(message_of(r));
  REQUIRE(r.ok());
  REQUIRE(r->contents.size() == 1);
  CHECK(r->contents[0].key == "run a/caf\xC3\xA9 \xE2\x82\xAC.bin");  // '+' is a space
  CHECK(r->contents[0].size == UINT64_MAX);
  CHECK(r->contents[0].etag == "9b2cf535f27731c974343645a3985328");
  CHECK(r->common_prefixes == std::vector<std::string>{"run a/step+1/"});
  // The token is opaque: sent back exactly as it came.
  CHECK(r->next_continuation_token == "run a/caf\xC3\xA9 \xE2\x82\xAC.bin");

  SECTION("an answer that says url is decoded even when not asked") {
    auto again = parse_list_objects_v2(kRgwListEncoded, false);
    REQUIRE(again.ok());
    CHECK(again->contents[0].key == r->contents[0].key);
  }
  SECTION("asked for url, answer silent: the keys cannot be read safely") {
    require_refused(parse_list_objects_v2(kAwsList, true), ErrorCode::kCorrupt,
                    "<EncodingType>url</EncodingType>");
    // With no key to misread, an empty page is simply empty.
    auto empty = parse_list_objects_v2(list_with("<IsTruncated>false</IsTruncated>"), true);
    REQUIRE(empty.ok());
    CHECK(empty->contents.empty());
  }
  SECTION("an unknown encoding: refused") {
    require_refused(
        parse_list_objects_v2(list_with("<EncodingType>base64</EncodingType><IsTruncated>false"
                                        "</IsTruncated>"),
                              false),
        ErrorCode::kCorrupt, "<EncodingType> 'base64' is not 'url'");
  }
}

TEST_CASE("ListObjectsV2: keys that decode badly are refused, naming element and key", "[s3_xml]") {
  auto row = GENERATE(
      as<std::pair<std::string, std::string>>{}, std::pair{"a%zzb", "bad %-escape at byte 1"},
      std::pair{"a%2", "bad %-escape at byte 1"}, std::pair{"a%00b", "decodes to a NUL"},
      std::pair{"a%FFb", "not UTF-8"}, std::pair{"%C3%28", "not UTF-8"},
      std::pair{"%ED%A0%80", "not UTF-8"});  // a surrogate
  const std::string xml =
      list_with("<EncodingType>url</EncodingType><IsTruncated>false</IsTruncated><Contents><Key>" +
                row.first + "</Key><Size>1</Size></Contents>");
  require_refused(parse_list_objects_v2(xml, true), ErrorCode::kCorrupt, row.second);
  require_refused(parse_list_objects_v2(xml, true), ErrorCode::kCorrupt,
                  "ListObjectsV2 answer: <Key>: url-encoded '" + row.first + "'");
}

TEST_CASE("ListObjectsV2: <Size> must be a number that fits", "[s3_xml]") {
  auto row = GENERATE(
      as<std::pair<std::string, std::string>>{}, std::pair{"abc", "<Size> 'abc' is not a number"},
      std::pair{"", "<Size> '' is not a number"}, std::pair{"-1", "<Size> '-1' is not a number"},
      std::pair{"+1", "<Size> '+1' is not a number"},
      std::pair{" 1", "<Size> ' 1' is not a number"},
      std::pair{"1 ", "<Size> '1 ' is not a number"},
      std::pair{"1.5", "<Size> '1.5' is not a number"},
      std::pair{"0x10", "<Size> '0x10' is not a number"},
      std::pair{"18446744073709551616", "<Size> '18446744073709551616' is out of range"});
  require_refused(
      parse_list_objects_v2(one_object("<Key>k</Key><Size>" + row.first + "</Size>"), false),
      ErrorCode::kCorrupt, "ListObjectsV2 answer: " + row.second);
}

TEST_CASE("ListObjectsV2: records must be whole and single", "[s3_xml]") {
  auto row = GENERATE(
      as<std::pair<std::string, std::string>>{},
      std::pair{"<Size>1</Size>", "<Contents> entry without <Key>"},
      std::pair{"<Key></Key><Size>1</Size>", "an empty <Key>"},
      std::pair{"<Key>k</Key>", "the <Contents> of 'k' has no <Size>"},
      std::pair{"<Key>k</Key><Key>j</Key><Size>1</Size>", "<Key> appears twice in one <Contents>"},
      std::pair{"<Key>k</Key><Size>1</Size><Size>1</Size>",
                "<Size> appears twice in one <Contents>"},
      std::pair{"<Key>a<b/>c</Key><Size>1</Size>", "<Key> holds elements where a value belongs"});
  require_refused(parse_list_objects_v2(one_object(row.first), false), ErrorCode::kCorrupt,
                  row.second);
}

TEST_CASE("ListObjectsV2: namespaces, unknown fields, empty values and split text", "[s3_xml]") {
  SECTION("a namespace prefix on every element") {
    auto r = parse_list_objects_v2(
        R"(<s3:ListBucketResult xmlns:s3="http://s3.amazonaws.com/doc/2006-03-01/">)"
        "<s3:IsTruncated>false</s3:IsTruncated><s3:Contents><s3:Key>k</s3:Key>"
        "<s3:Size>7</s3:Size></s3:Contents></s3:ListBucketResult>",
        false);
    INFO(message_of(r));
    REQUIRE(r.ok());
    REQUIRE(r->contents.size() == 1);
    CHECK(r->contents[0].size == 7);
  }
  SECTION("unknown elements, deep or shallow, are passed over") {
    auto r = parse_list_objects_v2(
        one_object("<ChecksumAlgorithm>CRC64NVME</ChecksumAlgorithm><Key>k</Key>"
                   "<RestoreStatus><IsRestoreInProgress>false</IsRestoreInProgress>"
                   "</RestoreStatus><Size>0</Size><ETag></ETag>"),
        false);
    INFO(message_of(r));
    REQUIRE(r.ok());
    CHECK(r->contents[0].etag.empty());
    CHECK(r->contents[0].last_modified.empty());
  }
  SECTION("a key that expat hands over in pieces") {
    // References, CDATA and line breaks each end a run of character data.
    auto r = parse_list_objects_v2(
        one_object("<Key>a&amp;b&lt;c&#x20AC;<![CDATA[<d>&]]>e\nf&#10;g</Key><Size>1</Size>"),
        false);
    INFO(message_of(r));
    REQUIRE(r.ok());
    CHECK(r->contents[0].key == "a&b<c\xE2\x82\xAC<d>&e\nf\ng");
  }
  SECTION("the ETag loses its quotes only as a pair") {
    auto r =
        parse_list_objects_v2(one_object("<Key>k</Key><Size>1</Size><ETag>\"abc</ETag>"), false);
    REQUIRE(r.ok());
    CHECK(r->contents[0].etag == "\"abc");
  }
}

// ---- multipart ----------------------------------------------------------------------------

TEST_CASE("InitiateMultipartUpload: the UploadId", "[s3_xml]") {
  auto aws = parse_initiate_multipart(kAwsInitiate);
  REQUIRE(aws.ok());
  CHECK(*aws == "VXBsb2FkIElEIGZvciA2aWWpbmcncyBteS1tb3ZpZS5tMnRzIHVwbG9hZA");
  auto rgw = parse_initiate_multipart(kRgwInitiate);
  REQUIRE(rgw.ok());
  CHECK(*rgw == "2~nHkfzQ3Ln0AVbHTm0ESUCoCsi9r3bVz");

  require_refused(
      parse_initiate_multipart(
          "<InitiateMultipartUploadResult><Key>k</Key></InitiateMultipartUploadResult>"),
      ErrorCode::kCorrupt, "no <UploadId>");
  require_refused(parse_initiate_multipart("<InitiateMultipartUploadResult><UploadId></UploadId>"
                                           "</InitiateMultipartUploadResult>"),
                  ErrorCode::kCorrupt, "no <UploadId>");
  require_refused(parse_initiate_multipart(kAwsNoSuchKey), ErrorCode::kIo, "NoSuchKey");
}

TEST_CASE("CompleteMultipartUpload: the ETag, and an <Error> sent with status 200", "[s3_xml]") {
  auto aws = parse_complete_multipart(kAwsComplete);
  REQUIRE(aws.ok());
  CHECK(aws->etag == "3858f62230ac3c915f300c664312c11f-9");

  auto rgw = parse_complete_multipart(kRgwComplete);
  INFO(message_of(rgw));
  REQUIRE(rgw.ok());
  CHECK(rgw->etag.empty());

  auto failed = parse_complete_multipart(kAwsInternalError);
  require_refused(failed, ErrorCode::kIo,
                  "CompleteMultipartUpload answer: S3 error InternalError: We encountered an "
                  "internal error. Please try again.");
  CHECK(failed.error().message().find("656c76696e6727732072657175657374") != std::string::npos);

  require_refused(parse_complete_multipart(kAwsInitiate), ErrorCode::kCorrupt,
                  "root element <InitiateMultipartUploadResult>, expected "
                  "<CompleteMultipartUploadResult>");
}

TEST_CASE("ListMultipartUploads: AWS's example and RGW's encoding", "[s3_xml]") {
  auto aws = parse_list_multipart_uploads(kAwsUploads, false);
  INFO(message_of(aws));
  REQUIRE(aws.ok());
  CHECK(aws->is_truncated);
  CHECK(aws->next_key_marker == "my-movie.m2ts");
  CHECK(aws->next_upload_id_marker == "YW55IGlkZWEgd2h5IGVsdmluZydzIHVwbG9hZCBmYWlsZWQ");
  REQUIRE(aws->uploads.size() == 2);
  CHECK(aws->uploads[0].key == "my-divisor");
  CHECK(aws->uploads[0].upload_id == "XMgbGlrZSBlbHZpbmcncyBub3QgaGF2aW5nIG11Y2ggbHVjaw");
  CHECK(aws->uploads[0].initiated == "2010-11-10T20:48:33.000Z");
  CHECK(aws->uploads[1].key == "my-movie.m2ts");

  SECTION("RGW: keys encoded without saying so, the marker raw") {
    auto rgw = parse_list_multipart_uploads(kRgwUploadsEncoded, true);
    INFO(message_of(rgw));
    REQUIRE(rgw.ok());
    REQUIRE(rgw->uploads.size() == 1);
    CHECK(rgw->uploads[0].key == "a+b c");
    CHECK(rgw->next_key_marker == "a+b c");
    CHECK(rgw->next_upload_id_marker == "2~xyz");
  }
  SECTION("AWS: <EncodingType>url</EncodingType> decodes the marker too") {
    const std::string xml =
        "<ListMultipartUploadsResult><EncodingType>url</EncodingType>"
        "<NextKeyMarker>a%2Bb+c</NextKeyMarker><IsTruncated>true</IsTruncated>"
        "<Upload><Key>a%2Bb+c</Key><UploadId>u</UploadId></Upload>"
        "</ListMultipartUploadsResult>";
    auto r = parse_list_multipart_uploads(xml, false);
    INFO(message_of(r));
    REQUIRE(r.ok());
    CHECK(r->uploads[0].key == "a+b c");
    CHECK(r->next_key_marker == "a+b c");
  }
  SECTION("refusals") {
    require_refused(
        parse_list_multipart_uploads("<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>"
                                     "</ListMultipartUploadsResult>",
                                     false),
        ErrorCode::kCorrupt,
        "ListMultipartUploads answer: <IsTruncated> is true without "
        "<NextKeyMarker>");
    require_refused(
        parse_list_multipart_uploads("<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                                     "<Upload><Key>k</Key></Upload></ListMultipartUploadsResult>",
                                     false),
        ErrorCode::kCorrupt, "the <Upload> of 'k' has no <UploadId>");
    require_refused(
        parse_list_multipart_uploads("<ListMultipartUploadsResult><IsTruncated>false</IsTruncated>"
                                     "<Upload><Key>a%zz</Key><UploadId>u</UploadId></Upload>"
                                     "</ListMultipartUploadsResult>",
                                     true),
        ErrorCode::kCorrupt, "bad %-escape");
  }
}

// ---- DeleteObjects ------------------------------------------------------------------------

TEST_CASE("DeleteObjects: deleted and failed keys", "[s3_xml]") {
  auto aws = parse_delete_result(kAwsDelete);
  INFO(message_of(aws));
  REQUIRE(aws.ok());
  CHECK(aws->deleted == std::vector<std::string>{"sample1.txt"});
  REQUIRE(aws->errors.size() == 1);
  CHECK(aws->errors[0].key == "sample2.txt");
  CHECK(aws->errors[0].code == "AccessDenied");
  CHECK(aws->errors[0].message == "Access Denied");

  auto rgw = parse_delete_result(kRgwDelete);
  REQUIRE(rgw.ok());
  CHECK(rgw->deleted == std::vector<std::string>{"step-000000100/a.bin"});
  REQUIRE(rgw->errors.size() == 1);
  CHECK(rgw->errors[0].code == "403");
  CHECK(rgw->errors[0].message == "AccessDenied");

  auto quiet = parse_delete_result(std::string(kDecl) + "<DeleteResult" + std::string(kNs) +
                                   "></DeleteResult>");
  REQUIRE(quiet.ok());
  CHECK(quiet->deleted.empty());
  CHECK(quiet->errors.empty());

  require_refused(parse_delete_result("<DeleteResult><Deleted></Deleted></DeleteResult>"),
                  ErrorCode::kCorrupt, "<Deleted> entry without <Key>");
  require_refused(parse_delete_result("<DeleteResult><Error><Code>x</Code></Error></DeleteResult>"),
                  ErrorCode::kCorrupt, "<Error> entry without <Key>");
  require_refused(parse_delete_result(kAwsInternalError), ErrorCode::kIo,
                  "DeleteObjects answer: S3 error InternalError");
}

// ---- refusals of hostile documents --------------------------------------------------------

TEST_CASE("a DTD is refused before any entity expands", "[s3_xml]") {
  const std::string laughs = R"(<?xml version="1.0"?>
<!DOCTYPE lolz [
 <!ENTITY lol "lol">
 <!ENTITY lol1 "&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;&lol;">
 <!ENTITY lol2 "&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;&lol1;">
 <!ENTITY lol3 "&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;&lol2;">
 <!ENTITY lol4 "&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;&lol3;">
 <!ENTITY lol5 "&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;&lol4;">
 <!ENTITY lol6 "&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;&lol5;">
 <!ENTITY lol7 "&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;&lol6;">
 <!ENTITY lol8 "&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;&lol7;">
 <!ENTITY lol9 "&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;&lol8;">
]>
<ListBucketResult><IsTruncated>false</IsTruncated><Contents><Key>&lol9;</Key><Size>1</Size>
</Contents></ListBucketResult>)";
  const std::string external = R"(<?xml version="1.0"?>
<!DOCTYPE Error [<!ENTITY xxe SYSTEM "file:///etc/passwd">]><Error><Code>&xxe;</Code></Error>)";
  const std::string bare = "<!DOCTYPE Error><Error><Code>x</Code></Error>";

  require_refused(parse_list_objects_v2(laughs, false), ErrorCode::kCorrupt,
                  "ListObjectsV2 answer: a DOCTYPE declaration");
  require_refused(parse_error(external), ErrorCode::kCorrupt, "a DOCTYPE declaration");
  require_refused(parse_error(bare), ErrorCode::kCorrupt, "a DOCTYPE declaration");
  // Without a DTD an entity reference is simply undefined.
  require_refused(parse_error("<Error><Code>&lol9;</Code></Error>"), ErrorCode::kCorrupt,
                  "not well-formed XML at line 1");
}

TEST_CASE("nesting deeper than kMaxDepth is refused", "[s3_xml]") {
  auto nested = [](int depth) {
    std::string open, close;
    for (int i = 2; i < depth; ++i) open += "<x>", close += "</x>";
    return "<Error>" + open + "<y/>" + close + "</Error>";  // root + depth-2 <x> + <y>
  };
  CHECK(parse_error(nested(kMaxDepth)).ok());
  require_refused(parse_error(nested(kMaxDepth + 1)), ErrorCode::kCorrupt, "nested deeper than 16");
  require_refused(parse_error(nested(100'000)), ErrorCode::kCorrupt, "nested deeper than 16");
}

TEST_CASE("an answer over kMaxAnswerBytes is refused unread", "[s3_xml]") {
  std::string big = "<Error><Code>x</Code></Error>";
  big.resize(kMaxAnswerBytes + 1, ' ');
  require_refused(parse_error(big), ErrorCode::kCorrupt, "67108865 bytes, more than the 67108864");
  big.resize(kMaxAnswerBytes);  // trailing white space is allowed after the root
  CHECK(parse_error(big).ok());
}

TEST_CASE("more than kMaxEntries entries are refused", "[s3_xml]") {
  auto prefixes = [](size_t n) {
    std::string body = "<IsTruncated>false</IsTruncated>";
    for (size_t i = 0; i < n; ++i) body += "<CommonPrefixes><Prefix>p/</Prefix></CommonPrefixes>";
    return list_with(body);
  };
  auto at_limit = parse_list_objects_v2(prefixes(kMaxEntries), false);
  REQUIRE(at_limit.ok());
  CHECK(at_limit->common_prefixes.size() == kMaxEntries);
  require_refused(parse_list_objects_v2(prefixes(kMaxEntries + 1), false), ErrorCode::kCorrupt,
                  "more than 100000 entries");
}

TEST_CASE("what is not one well-formed document is refused", "[s3_xml]") {
  auto xml =
      GENERATE(as<std::string>{}, "", "   ", "not xml", "<Error>", "<Error></Error><Error></Error>",
               "<Error></Err>", "<Error><Code>a</Code></Error>trailing", "\xFF\xFE<Error/>",
               "<Error><Code>\xC3\x28</Code></Error>", "<Error a='1' a='2'/>");
  INFO(xml);
  require_refused(parse_error(xml), ErrorCode::kCorrupt, "S3 error answer: ");
}

// ---- url_decode ---------------------------------------------------------------------------

TEST_CASE("url_decode", "[s3_xml]") {
  auto row = GENERATE(as<std::pair<std::string, std::string>>{}, std::pair{"", ""},
                      std::pair{"plain/key.bin", "plain/key.bin"}, std::pair{"a+b", "a b"},
                      std::pair{"a%2Bb", "a+b"}, std::pair{"a%2bb", "a+b"},
                      std::pair{"%E2%82%AC%20x", "\xE2\x82\xAC x"}, std::pair{"%25", "%"},
                      std::pair{"\xC3\xA9", "\xC3\xA9"});
  auto got = url_decode(row.first);
  INFO(message_of(got));
  REQUIRE(got.ok());
  CHECK(*got == row.second);
  require_refused(url_decode("%"), ErrorCode::kCorrupt, "bad %-escape at byte 0");
  require_refused(url_decode("ab%g0"), ErrorCode::kCorrupt, "bad %-escape at byte 2");
  require_refused(url_decode("%00"), ErrorCode::kCorrupt, "decodes to a NUL");
  require_refused(url_decode("%C0%80"), ErrorCode::kCorrupt, "not UTF-8");  // overlong NUL
}

// ---- request bodies -----------------------------------------------------------------------

TEST_CASE("complete_multipart_body", "[s3_xml]") {
  const std::vector<CompletedPart> parts = {{1, "\"a54357aff0632cce46d942af68356b38\""},
                                            {2, "0c78aef83f66abc1fa1e8477f296d394"},
                                            {10000, "acbd18db4cc2f85cedef654fccc4a4d8-3"}};
  auto body = complete_multipart_body(parts);
  INFO(message_of(body));
  REQUIRE(body.ok());
  CHECK(*body ==
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
        "<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">"
        "<Part><PartNumber>1</PartNumber><ETag>\"a54357aff0632cce46d942af68356b38\"</ETag></Part>"
        "<Part><PartNumber>2</PartNumber><ETag>\"0c78aef83f66abc1fa1e8477f296d394\"</ETag></Part>"
        "<Part><PartNumber>10000</PartNumber><ETag>\"acbd18db4cc2f85cedef654fccc4a4d8-3\"</ETag>"
        "</Part></CompleteMultipartUpload>");
  CHECK(texts_of(*body, "PartNumber") == std::vector<std::string>{"1", "2", "10000"});

  SECTION("odd ETags are escaped and read back") {
    const std::vector<CompletedPart> odd = {{3, "a&b<c>d\"e'f"}};
    auto escaped = complete_multipart_body(odd);
    REQUIRE(escaped.ok());
    CHECK(texts_of(*escaped, "ETag") == std::vector<std::string>{"\"a&b<c>d\"e'f\""});
  }
}

TEST_CASE("complete_multipart_body keeps S3's rules on parts", "[s3_xml]") {
  using Parts = std::vector<CompletedPart>;
  auto row = GENERATE(as<std::pair<Parts, std::string>>{}, std::pair{Parts{}, "no parts"},
                      std::pair{Parts{{0, "e"}}, "part number 0 is outside 1..10000"},
                      std::pair{Parts{{10001, "e"}}, "part number 10001 is outside 1..10000"},
                      std::pair{Parts{{2, "e"}, {1, "e"}}, "part 1 follows part 2"},
                      std::pair{Parts{{2, "e"}, {2, "e"}}, "part 2 follows part 2"},
                      std::pair{Parts{{1, ""}}, "part 1 has no ETag"},
                      std::pair{Parts{{1, "\"\""}}, "part 1 has no ETag"},
                      std::pair{Parts{{1, "a\x01"}},
                                "ETag of part 1 'a\\x01' holds a character XML 1.0 cannot carry"});
  auto body = complete_multipart_body(row.first);
  require_refused(body, ErrorCode::kInvalid, row.second);
  CHECK(body.error().message().rfind("CompleteMultipartUpload body: ", 0) == 0);
}

TEST_CASE("delete_objects_body escapes keys and reads back", "[s3_xml]") {
  const std::vector<std::string> keys = {"plain/key.bin",
                                         "amp&lt<gt>quot\"apos'",
                                         "tab\tlf\ncr\rcrlf\r\n end ",
                                         "caf\xC3\xA9/\xE2\x82\xAC/\xF0\x9F\x98\x80",
                                         "a+b%2B c",
                                         "]]>"};
  for (const bool quiet : {true, false}) {
    auto body = delete_objects_body(keys, quiet);
    INFO(message_of(body));
    REQUIRE(body.ok());
    CHECK(body->rfind("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Delete xmlns=", 0) == 0);
    CHECK(texts_of(*body, "Key") == keys);
    CHECK(texts_of(*body, "Quiet") == std::vector<std::string>{quiet ? "true" : "false"});
  }

  std::vector<std::string> many(kMaxDeleteKeys, "k");
  CHECK(delete_objects_body(many, true).ok());
  many.push_back("k");
  require_refused(delete_objects_body(many, true), ErrorCode::kInvalid,
                  "1001 keys, more than the 1000");
  require_refused(delete_objects_body({}, true), ErrorCode::kInvalid, "no keys");
  auto bad = GENERATE(
      as<std::pair<std::string, std::string>>{}, std::pair{"", "is empty"},
      std::pair{"a\xFF", "'a\\xff' is not UTF-8"}, std::pair{"a\xC3", "'a\\xc3' is not UTF-8"},
      std::pair{"a\x01z", "'a\\x01z' holds a character XML 1.0 cannot carry"},
      std::pair{std::string("a\0z", 3), "'a\\x00z' holds a character XML 1.0 cannot carry"},
      std::pair{"\xEF\xBF\xBF", "'\xEF\xBF\xBF' holds a character XML 1.0 cannot carry"});
  const std::vector<std::string> one = {bad.first};
  require_refused(delete_objects_body(one, false), ErrorCode::kInvalid,
                  "DeleteObjects body: key 0 " + bad.second);
}

// ---- garbage ------------------------------------------------------------------------------

// One random edit: flip, insert, delete, cut, or copy a span elsewhere.
std::string mutate(std::string doc, std::mt19937& rng) {
  auto pick = [&](size_t n) {
    return n == 0 ? 0 : std::uniform_int_distribution<size_t>(0, n - 1)(rng);
  };
  const std::string_view alphabet = "<>/&;\"'=!?[]%+ -0123456789abcxyzKeySizeContents\xC3\xFF";
  switch (pick(5)) {
    case 0:
      if (!doc.empty()) doc[pick(doc.size())] = static_cast<char>(pick(256));
      break;
    case 1: {
      const size_t where = pick(doc.size() + 1);
      doc.insert(where, 1, alphabet[pick(alphabet.size())]);
      break;
    }
    case 2:
      if (!doc.empty()) {
        const size_t where = pick(doc.size());
        doc.erase(where, 1 + pick(8));
      }
      break;
    case 3:
      doc.resize(pick(doc.size() + 1));
      break;
    default: {
      const size_t from = pick(doc.size() + 1);
      const std::string span = doc.substr(from, pick(64));
      doc.insert(pick(doc.size() + 1), span);
    }
  }
  return doc;
}

void no_throw_on(const std::string& doc) {
  CHECK_NOTHROW((void)parse_error(doc));
  for (const bool url : {false, true}) {
    CHECK_NOTHROW([&] {
      auto r = parse_list_objects_v2(doc, url);
      if (!r.ok()) return;
      for (const auto& o : r->contents) CHECK(o.key.find('\0') == std::string::npos);
      if (r->is_truncated) CHECK_FALSE(r->next_continuation_token.empty());
    }());
    CHECK_NOTHROW((void)parse_list_multipart_uploads(doc, url));
  }
  CHECK_NOTHROW((void)parse_initiate_multipart(doc));
  CHECK_NOTHROW((void)parse_complete_multipart(doc));
  CHECK_NOTHROW((void)parse_delete_result(doc));
  CHECK_NOTHROW((void)url_decode(doc));
}

TEST_CASE("no answer, however mangled, makes a parser throw or crash", "[s3_xml]") {
  const std::vector<std::string> valid = {
      kAwsList,     kAwsListTruncated,  kRgwListEncoded,   kAwsInitiate,  kRgwInitiate,
      kAwsComplete, kRgwComplete,       kAwsInternalError, kAwsNoSuchKey, kRgwNoSuchKey,
      kAwsUploads,  kRgwUploadsEncoded, kAwsDelete,        kRgwDelete};
  std::mt19937 rng(20240301);
  for (const std::string& doc : valid) {
    std::string current = doc;
    for (int i = 0; i < 300; ++i) {
      // Mostly a fresh edit of the valid document, sometimes one more on top of the last.
      current = mutate(i % 4 == 3 ? current : doc, rng);
      no_throw_on(current);
    }
  }
}

}  // namespace
}  // namespace shardguard::storage::s3
