// sarama 1.22.1 (Debian's Go package) against one broker, as tests/apis/test_go_clients.py
// runs it: each step prints one JSON line saying what it saw, and the Python test checks
// the lines. Built offline from /usr/share/gocode. (kafka-go 0.2.1 is checked by its own
// package tests there.)
//
//	oldclients BOOTSTRAP
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/Shopify/sarama"
)

const count = 10

func report(step string, fields map[string]interface{}) {
	fields["step"] = step
	line, _ := json.Marshal(fields)
	fmt.Println(string(line))
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func config(version sarama.KafkaVersion) *sarama.Config {
	c := sarama.NewConfig()
	c.Version = version
	c.ClientID = "oldclients"
	c.Producer.Return.Successes = true
	c.Consumer.Return.Errors = true
	c.Metadata.Retry.Backoff = 50 * time.Millisecond
	return c
}

func saramaAdmin(addrs []string) {
	admin, err := sarama.NewClusterAdmin(addrs, config(sarama.V1_0_0_0))
	if err != nil {
		report("sarama-admin", map[string]interface{}{"error": errText(err)})
		return
	}
	defer admin.Close()
	err = admin.CreateTopic("sarama-admin", &sarama.TopicDetail{NumPartitions: 2, ReplicationFactor: 1}, false)
	topics, lerr := admin.ListTopics()
	names := []string{}
	partitions := int32(-1)
	for name, detail := range topics {
		names = append(names, name)
		if name == "sarama-admin" {
			partitions = detail.NumPartitions
		}
	}
	sort.Strings(names)
	report("sarama-admin", map[string]interface{}{
		"create": errText(err), "list": errText(lerr), "topics": names, "partitions": partitions,
	})
}

func saramaProduceConsume(addrs []string, version sarama.KafkaVersion, codec sarama.CompressionCodec, idempotent bool, topic string) {
	c := config(version)
	c.Producer.Compression = codec
	if idempotent {
		c.Producer.Idempotent = true
		c.Producer.RequiredAcks = sarama.WaitForAll
		c.Net.MaxOpenRequests = 1
	}
	producer, err := sarama.NewSyncProducer(addrs, c)
	if err != nil {
		report("sarama-produce", map[string]interface{}{"topic": topic, "error": errText(err)})
		return
	}
	offsets := []int64{}
	var perr error
	for i := 0; i < count; i++ {
		_, off, err := producer.SendMessage(&sarama.ProducerMessage{
			Topic: topic, Partition: 0,
			Key:   sarama.StringEncoder(fmt.Sprintf("k%d", i)),
			Value: sarama.StringEncoder(fmt.Sprintf("value %d", i)),
		})
		if err != nil {
			perr = err
			break
		}
		offsets = append(offsets, off)
	}
	producer.Close()
	values := []string{}
	consumer, err := sarama.NewConsumer(addrs, config(version))
	if err == nil {
		pc, err2 := consumer.ConsumePartition(topic, 0, sarama.OffsetOldest)
		err = err2
		if err == nil {
			deadline := time.After(20 * time.Second)
		loop:
			for len(values) < len(offsets) {
				select {
				case m := <-pc.Messages():
					values = append(values, fmt.Sprintf("%d %s %s", m.Offset, m.Key, m.Value))
				case e := <-pc.Errors():
					err = e
					break loop
				case <-deadline:
					break loop
				}
			}
			pc.Close()
		}
		consumer.Close()
	}
	report("sarama-produce", map[string]interface{}{
		"topic": topic, "produce": errText(perr), "offsets": offsets, "consume": errText(err), "values": values,
	})
}

type groupHandler struct {
	seen chan string
}

func (h groupHandler) Setup(sarama.ConsumerGroupSession) error   { return nil }
func (h groupHandler) Cleanup(sarama.ConsumerGroupSession) error { return nil }
func (h groupHandler) ConsumeClaim(s sarama.ConsumerGroupSession, claim sarama.ConsumerGroupClaim) error {
	for m := range claim.Messages() {
		s.MarkMessage(m, "")
		h.seen <- string(m.Value)
	}
	return nil
}

func saramaGroup(addrs []string, topic string) {
	c := config(sarama.V0_10_2_0)
	c.Consumer.Offsets.Initial = sarama.OffsetOldest
	c.Consumer.Offsets.CommitInterval = 100 * time.Millisecond
	group, err := sarama.NewConsumerGroup(addrs, "sarama-group", c)
	if err != nil {
		report("sarama-group", map[string]interface{}{"error": errText(err)})
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	handler := groupHandler{seen: make(chan string, 100)}
	done := make(chan error, 1)
	go func() { done <- group.Consume(ctx, []string{topic}, handler) }()
	values := []string{}
	deadline := time.After(30 * time.Second)
loop:
	for len(values) < count {
		select {
		case v := <-handler.seen:
			values = append(values, v)
		case <-deadline:
			break loop
		}
	}
	time.Sleep(500 * time.Millisecond) // one commit interval and more
	cancel()
	cerr := <-done
	group.Close()
	// What the group committed, read back with a plain offset manager.
	client, err := sarama.NewClient(addrs, c)
	committed := int64(-2)
	if err == nil {
		om, err2 := sarama.NewOffsetManagerFromClient("sarama-group", client)
		err = err2
		if err == nil {
			pom, _ := om.ManagePartition(topic, 0)
			committed, _ = pom.NextOffset()
			pom.Close()
			om.Close()
		}
		client.Close()
	}
	report("sarama-group", map[string]interface{}{
		"values": values, "consume": errText(cerr), "committed": committed, "error": errText(err),
	})
}

func main() {
	addrs := []string{os.Args[1]}
	saramaAdmin(addrs)
	codecs := map[string]sarama.CompressionCodec{
		"none": sarama.CompressionNone, "gzip": sarama.CompressionGZIP,
		"snappy": sarama.CompressionSnappy, "lz4": sarama.CompressionLZ4,
	}
	for name, codec := range codecs {
		if codec != sarama.CompressionLZ4 { // LZ4 came with Kafka 0.10 (KIP-57)
			saramaProduceConsume(addrs, sarama.V0_9_0_0, codec, false, "sarama-0.9-"+name)
		}
		saramaProduceConsume(addrs, sarama.V0_10_0_0, codec, false, "sarama-0.10-"+name)
		saramaProduceConsume(addrs, sarama.V0_11_0_0, codec, true, "sarama-0.11-idempotent-"+name)
	}
	// sarama 1.22 sends zstd on Produce v3, which Kafka 3.9 refuses (zstd needs v7, KIP-110).
	saramaProduceConsume(addrs, sarama.V0_11_0_0, sarama.CompressionZSTD, false, "sarama-0.11-zstd")
	saramaGroup(addrs, "sarama-0.10-gzip")
}
