package rls

import (
	"strings"

	ratelimit "github.com/envoyproxy/go-control-plane/envoy/extensions/common/ratelimit/v3"
	rlsv3 "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// dynamicMetadata builds the response's dynamic metadata as envoy's
// service does with RESPONSE_DYNAMIC_METADATA: "domain"; "descriptors",
// one struct per descriptor with its "entries" as "key=value", its
// "limit" override (in the protobuf text form) and its "hitsAddend" when
// set; the request's "hitsAddend" when not 0; and "metadata", the
// metadata of the rules whose descriptors passed (status OK), merged in
// the order of the descriptors, when there is any.
func dynamicMetadata(req *rlsv3.RateLimitRequest, items []item, sts []*rlsv3.RateLimitResponse_DescriptorStatus) *structpb.Struct {
	descs := make([]*structpb.Value, 0, len(req.GetDescriptors()))
	for _, d := range req.GetDescriptors() {
		descs = append(descs, structpb.NewStructValue(descriptorStruct(d)))
	}
	fields := map[string]*structpb.Value{
		"domain":      structpb.NewStringValue(req.GetDomain()),
		"descriptors": structpb.NewListValue(&structpb.ListValue{Values: descs}),
	}
	if h := req.GetHitsAddend(); h != 0 {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h))
	}
	passed := &structpb.Struct{Fields: map[string]*structpb.Value{}}
	for i := range items {
		it := &items[i]
		if it.rule == nil || it.rule.Metadata == nil || sts[i].Code != rlsv3.RateLimitResponse_OK {
			continue
		}
		// The rules' metadata holds only what structpb takes (package
		// rules reads it so), so that this cannot fail.
		if m, err := structpb.NewStruct(it.rule.Metadata); err == nil {
			mergeStruct(passed, m)
		}
	}
	if len(passed.Fields) > 0 {
		fields["metadata"] = structpb.NewStructValue(passed)
	}
	return &structpb.Struct{Fields: fields}
}

// descriptorStruct describes one descriptor of the request.
func descriptorStruct(d *ratelimit.RateLimitDescriptor) *structpb.Struct {
	entries := make([]*structpb.Value, 0, len(d.GetEntries()))
	for _, e := range d.GetEntries() {
		entries = append(entries, structpb.NewStringValue(e.GetKey()+"="+e.GetValue()))
	}
	fields := map[string]*structpb.Value{"entries": structpb.NewListValue(&structpb.ListValue{Values: entries})}
	if l := d.GetLimit(); l != nil {
		fields["limit"] = structpb.NewStringValue(strings.TrimSpace(l.String()))
	}
	if h := d.GetHitsAddend(); h != nil {
		fields["hitsAddend"] = structpb.NewNumberValue(float64(h.GetValue()))
	}
	return &structpb.Struct{Fields: fields}
}

// mergeStruct merges src into dst, which src's values may then share: a
// field dst lacks is added; where both hold a struct, they are merged;
// otherwise dst's value is kept.
func mergeStruct(dst, src *structpb.Struct) {
	for k, v := range src.GetFields() {
		have, ok := dst.Fields[k]
		if !ok {
			dst.Fields[k] = v
			continue
		}
		if a, b := have.GetStructValue(), v.GetStructValue(); a != nil && b != nil {
			mergeStruct(a, b)
		}
	}
}
