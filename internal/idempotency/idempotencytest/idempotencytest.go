// Package idempotencytest registers proto descriptors for tests of the idempotency
// decision, as generated code would, so that the tests of packages idempotency,
// retry and hedge need no generated code of their own.
package idempotencytest

import (
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protodesc"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
)

// Register registers, in protoregistry.GlobalFiles, a file pkg/store.proto declaring
// a message pkg.Msg and a service pkg.Store whose methods take and return it: Get
// declares idempotency_level NO_SIDE_EFFECTS, Put IDEMPOTENT, Patch
// IDEMPOTENCY_UNKNOWN, and Post nothing. The full method names are
// "/pkg.Store/Get" and so on. Registering a pkg twice is an error.
func Register(pkg string) error {
	level := func(l descriptorpb.MethodOptions_IdempotencyLevel) *descriptorpb.MethodOptions {
		return &descriptorpb.MethodOptions{IdempotencyLevel: l.Enum()}
	}
	msg := "." + pkg + ".Msg"
	method := func(name string, opts *descriptorpb.MethodOptions) *descriptorpb.MethodDescriptorProto {
		return &descriptorpb.MethodDescriptorProto{Name: proto.String(name), InputType: proto.String(msg), OutputType: proto.String(msg), Options: opts}
	}
	fd, err := protodesc.NewFile(&descriptorpb.FileDescriptorProto{
		Name:        proto.String(pkg + "/store.proto"),
		Package:     proto.String(pkg),
		Syntax:      proto.String("proto3"),
		MessageType: []*descriptorpb.DescriptorProto{{Name: proto.String("Msg")}},
		Service: []*descriptorpb.ServiceDescriptorProto{{
			Name: proto.String("Store"),
			Method: []*descriptorpb.MethodDescriptorProto{
				method("Get", level(descriptorpb.MethodOptions_NO_SIDE_EFFECTS)),
				method("Put", level(descriptorpb.MethodOptions_IDEMPOTENT)),
				method("Patch", level(descriptorpb.MethodOptions_IDEMPOTENCY_UNKNOWN)),
				method("Post", nil),
			},
		}},
	}, protoregistry.GlobalFiles)
	if err != nil {
		return err
	}
	return protoregistry.GlobalFiles.RegisterFile(fd)
}
